"""Silent wrong answers (an infinite metric, a repeated seed, 16-bit PNGs, a
modified cached dataset, an explicit num_classes). Real MLflow on SQLite, real files."""

from __future__ import annotations

import logging
import math
import re

import pytest
from _sweep_helpers import empty_store

from lipsweep.__main__ import main
from lipsweep.decide.arms import arm_stats, group_arms


def _store(tmp_path, runs):
    """A real MLflow SQLite store: a parent sweep run and ``runs`` (params, metrics) as
    FINISHED trial runs; returns (uri, [run ids])."""
    from mlflow.tracking import MlflowClient

    uri = empty_store(tmp_path / "mlflow.db")
    c = MlflowClient(uri)
    exp = c.create_experiment("x", artifact_location=(tmp_path / "artifacts").as_uri())
    parent = c.create_run(exp, tags={"lipsweep.kind": "sweep"}).info.run_id
    ids = []
    for i, (params, metrics) in enumerate(runs):
        rid = c.create_run(
            exp, run_name=f"t{i}", tags={"lipsweep.kind": "trial", "mlflow.parentRunId": parent}
        ).info.run_id
        for k, v in params.items():
            c.log_param(rid, k, v)
        for k, v in metrics.items():
            c.log_metric(rid, k, v)
        c.set_terminated(rid, "FINISHED")
        ids.append(rid)
    return uri, ids


@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_an_infinite_metric_is_never_ranked_nor_tagged_pareto(tmp_path, caplog, bad):
    """MLflow stores inf as 1.798e308. Such a run is neither ranked first nor tagged
    pareto=true, and pareto (scatter plot included) finishes with acc_clean = inf."""
    runs = [
        ({"regularizer": "none", "seed": "0"}, {"acc_clean": 80.0, "acc_pgd_4": 10.0}),
        ({"regularizer": "jasmin", "k": "0", "seed": "0"}, {"acc_clean": 70.0, "acc_pgd_4": 20.0}),
        ({"regularizer": "jasmin", "k": "10", "seed": "0"}, {"acc_clean": bad, "acc_pgd_4": 30.0}),
    ]
    uri, ids = _store(tmp_path, runs)
    caplog.set_level(logging.WARNING)
    argv = ["pareto", "--experiment", "x", "--tracking-uri", uri]
    assert main([*argv, "--objective", "acc_clean:max", "--objective", "acc_pgd_4:max"]) == 0
    from lipsweep.tracking import TrackingReader

    reader = TrackingReader(uri, "x")
    tags = {rid: reader.get_run(rid).data.tags for rid in ids}
    assert [tags[r]["pareto"] for r in ids] == ["true", "true", "false"]
    assert tags[ids[2]]["pareto_rank"] == "0"
    shown = "inf" if bad > 0 else "-inf"
    assert f"run {ids[2]} is left out of the ranking and the front: acc_clean is {shown}" in (
        caplog.text
    )


def _rec(rid, seed, clean):
    return {
        "run_id": rid,
        "metrics": {"acc_clean": clean},
        "params": {"regularizer": "none", "lr": "0.001", "seed": str(seed)},
    }


def test_a_repeated_seed_counts_once_and_the_run_used_is_named(caplog):
    """Two runs of one arm with seed 0 (10 and 30): the arm's 'mean' is not whichever comes
    last (30) with the other run silently dropped; one run is used, and named."""
    caplog.set_level(logging.WARNING)
    (arm,) = group_arms([_rec("b-run", 0, 30.0), _rec("a-run", 0, 10.0), _rec("c-run", 1, 20.0)])
    s = arm_stats(arm, "acc_clean")
    assert (s.n, s.mean) == (2, 15.0)  # seed 0 -> a-run (10), seed 1 -> 20
    assert "seed 0 has 2 runs (a-run, b-run); its statistics use run a-run only" in caplog.text


def test_an_arms_n_counts_the_runs_its_statistics_use(caplog):
    """Two runs of one arm with seed 0: pareto's table does not show ``n 2`` beside a "mean"
    that is one run's value. n counts one run per seed, as the statistics do, wherever an arm's n
    is shown (the table, the figures' labels, the report, the export pick); an arm with one
    seed run twice is not an arm of two seeds, so such a sweep ranks runs."""
    from lipsweep.decide.arms import arm_records, arm_table, max_seeds
    from lipsweep.decide.pareto import Objective
    from lipsweep.decide.report import arm_markdown

    caplog.set_level(logging.WARNING)
    twice = [_rec("a-run", 0, 10.0), _rec("b-run", 0, 30.0)]
    other = [{**_rec(f"o{s}", s, 20.0), "params": {**_rec("", s, 0)["params"], "lr": "0.01"}}
             for s in (0, 1)]  # fmt: skip
    arms = group_arms(twice + other)
    rows = arm_table(arms, [1, 1], [Objective("acc_clean", "max")]).splitlines()[2:4]
    cells = [re.split(r"\s{2,}", row.strip())[1:] for row in rows]  # arm, n, mean [95% CI]
    assert cells == [
        ["baseline (lr=0.01)", "2", "20.00 [20.00, 20.00]"],
        ["baseline (lr=0.001)", "1", "10.00"],
    ], rows
    assert [r["run_name"] for r in arm_records(arms, ["acc_clean"])] == ["n=1", "n=2"]
    assert "| 1 | 0 (2 runs, first used) |" in arm_markdown(arms, [1, 1])
    (arm,) = group_arms(twice)
    assert (arm.n, arm_stats(arm, "acc_clean").n, max_seeds([arm])) == (1, 1, 1)


def _objectives(clean: float, pgd: float) -> dict[str, float]:
    return {"acc_clean": clean, "acc_pgd_4": pgd, "acc_aa_2": 1.0, "lip_jacobian_median": 1.0}


def test_confirm_top_breaks_ties_in_a_rank_towards_the_better_first_objective(tmp_path):
    """``confirm --top 1`` with two runs (then two arms) on the front, neither dominating:
    the one with the better first objective (acc_clean, max) is confirmed, over runs and
    over arms alike."""
    from lipsweep.decide.commands import read_tracker
    from lipsweep.decide.confirm import choose_runs

    def params(lr: str, seed: int) -> dict[str, str]:
        return {"regularizer": "none", "lr": lr, "seed": str(seed)}

    worse_first, better_first = _objectives(25.0, 8.0), _objectives(30.0, 5.0)
    runs = [(params("0.002", 0), worse_first), (params("0.001", 0), better_first)]
    uri, ids = _store(tmp_path / "runs", runs)
    assert choose_runs(read_tracker(uri, "x"), "x", None, 1) == [ids[1]]
    arms = [(params(lr, s), m) for lr, m in runs for s in (0, 1)]
    uri, ids = _store(tmp_path / "arms", arms)
    assert choose_runs(read_tracker(uri, "x"), "x", None, 1) == ids[2:]
