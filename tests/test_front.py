"""One front (lipsweep.decide.front): built once by build_front, read by every view.

The table, pareto.json, the tags, the figures, the report and the API result take the built
Front; none of them ranks, groups arms or selects again."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from lipsweep.api.results import ParetoResult
from lipsweep.decide.arms import arm_records, arm_table, group_arms
from lipsweep.decide.front import build_front
from lipsweep.decide.pareto import format_front_table, front_doc, pareto_rank
from lipsweep.decide.selection import DEFAULT_SELECT_RULE, select_from_arm_front

BASE = {"regularizer": "none"}
JAS = {"regularizer": "jasmin", "k": "10", "lam": "0.01", "aggregation": "mean"}
J0 = {"regularizer": "jasmin", "k": "0", "lam": "0.01", "aggregation": "mean"}
# (params, seed, acc_clean, acc_pgd_4): means baseline (32, 5), k=10 (31, 7), k=0 (31.5, 2)
ROWS = [
    (BASE, 0, 30.0, 4.0),
    (BASE, 1, 34.0, 6.0),
    (JAS, 0, 30.0, 6.0),
    (JAS, 1, 32.0, 8.0),
    (J0, 0, 31.5, 2.0),
]
RECORDS = [
    {
        "run_id": f"r{i}",
        "run_name": f"t{i}",
        "params": {**p, "seed": str(seed)},
        "metrics": {
            "acc_clean": clean,
            "acc_pgd_4": pgd,
            "acc_aa_2": pgd / 2,
            "lip_jacobian_median": 10 - pgd,
        },
    }
    for i, (p, seed, clean, pgd) in enumerate(ROWS)
]
RANKERS = [
    ("lipsweep.decide.pareto", "pareto_rank"),
    ("lipsweep.decide.arms", "group_arms"),
    ("lipsweep.decide.arms", "arm_records"),
    ("lipsweep.decide.selection", "select_from_front"),
    ("lipsweep.decide.selection", "select_from_arm_front"),
    ("lipsweep.decide.front", "pareto_rank"),
    ("lipsweep.decide.front", "group_arms"),
    ("lipsweep.decide.front", "select_from_front"),
    ("lipsweep.decide.front", "select_from_arm_front"),
]


@pytest.fixture
def no_png(monkeypatch):
    """Figures are built but not rendered (rendering is what costs; tests/test_pareto.py draws
    them): what matters here is what they are drawn from."""
    from pathlib import Path

    from lipsweep.decide import plots

    drawn: list[Path] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append(Path(path)) or Path(path))
    return drawn


def _forbid_ranking(monkeypatch) -> None:
    def ranked_again(*args, **kwargs):
        raise AssertionError("a view ranked, grouped or selected again")

    for module, name in RANKERS:
        monkeypatch.setattr(importlib.import_module(module), name, ranked_again)


@pytest.mark.parametrize("per_run", [False, True])
def test_every_view_reads_the_built_front_and_never_ranks(tmp_path, monkeypatch, no_png, per_run):
    from lipsweep.decide.plots import front_parallel, front_scatter
    from lipsweep.decide.report import write_front_report

    front = build_front(RECORDS, rule=DEFAULT_SELECT_RULE, per_run=per_run)
    runs = pareto_rank(RECORDS)  # what the views showed when each derived its own
    arms = group_arms(RECORDS)
    arm_ranks = pareto_rank(arm_records(arms, [o.name for o in runs.objectives])).ranks
    arm_of = {t.run_id: i for i, a in enumerate(arms) for t in a.runs}
    if per_run:
        assert front.ranks == tuple(runs.ranks)
        want_table = format_front_table(
            runs.trials, runs.ranks, runs.values, runs.excluded, runs.objectives
        )
        want_json = front_doc(
            runs.trials, runs.ranks, runs.values, runs.excluded, runs.objectives, front.selection
        )
    else:
        assert front.ranks == tuple(arm_ranks[arm_of[r["run_id"]]] for r in RECORDS)
        sel = select_from_arm_front(RECORDS, arms, arm_ranks, DEFAULT_SELECT_RULE)
        assert front.selection == sel
        want_table = arm_table(arms, arm_ranks, runs.objectives)
        r = np.asarray(front.ranks)
        want_json = front_doc(runs.trials, r, runs.values, runs.excluded, runs.objectives, sel)
    _forbid_ranking(monkeypatch)

    assert front.ranked_by == ("runs" if per_run else "arms")
    assert front.table == want_table
    doc = front.as_json()
    assert {k: v for k, v in doc.items() if k not in ("ranked_by", "arms")} == want_json
    assert [a["rank"] for a in doc["arms"]] == sorted(int(r) for r in arm_ranks)
    tags = front.run_tags()
    assert [tags[r["run_id"]]["pareto_rank"] for r in RECORDS] == list(front.ranks)
    assert front.parent_tags()["pareto_front_size"] == sum(r == 1 for r in front.ranks)
    front_scatter(front, tmp_path / "scatter.png", title="t")
    front_parallel(front, tmp_path / "parallel.png")
    md = write_front_report(front, {}, tmp_path / "rep", "e", "test").read_text()
    assert [p.name for p in no_png] == [
        "scatter.png",
        "parallel.png",
        "paired_differences.png",
        "pareto_scatter.png",
    ]
    assert "| baseline | 2 | 0, 1 | 1 |" in md
    result = ParetoResult("e", front, None)
    assert result.pick is not None and result.pick.run_id == front.selection.run_id
    assert result.ranks == {r["run_id"]: k for r, k in zip(RECORDS, front.ranks)}
    assert all(m.run_ids for m in result.front) and result.table == want_table
    assert front.selected_by.startswith(f"{DEFAULT_SELECT_RULE} (")


def test_no_pick_is_said_and_a_bad_rule_is_an_error():
    from lipsweep.core.config_base import ConfigError

    front = build_front(RECORDS, rule="max:acc_clean,within:acc_pgd_4:0,within:acc_clean:0")
    assert front.selection is None and "no front run meets all of" in front.no_selection
    with pytest.raises(ValueError, match="picked no run"):
        front.selected_by  # noqa: B018
    with pytest.raises(ConfigError, match="select"):
        build_front(RECORDS, rule="most:robust")


def test_report_header_with_one_seed_per_arm_reads_as_english(tmp_path):
    from lipsweep.decide.report import write_front_report

    params = [{"regularizer": "none"}, {"regularizer": "jasmin", "k": "0", "lam": "0.01"}]
    recs = [
        {"run_id": f"r{i}", "params": {**p, "seed": 0}, "metrics": {"acc_clean": 20.0 + i}}
        for i, p in enumerate(params)
    ]
    front = build_front(recs, ["acc_clean:max"])
    md = write_front_report(front, {}, tmp_path, "e", "test").read_text()
    assert "at most 1 seeds" not in md and "2 arms (configs that differ only in seed; one" in md
