"""lipsweep.decide.pareto and lipsweep.decide.plots against brute-force references written here."""

from __future__ import annotations

import json
import math
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lipsweep.core.config_base import ConfigError
from lipsweep.decide.front import build_front
from lipsweep.decide.pareto import (
    DEFAULT_OBJECTIVES,
    Objective,
    config_label,
    format_front_table,
    non_dominated_ranks,
    pareto_rank,
    parse_objective,
    resolve_objectives,
)
from lipsweep.decide.plots import parallel_coordinates, scatter_front
from lipsweep.decide.selection import DEFAULT_SELECT_RULE, parse_selection_rule, select_from_front

# ---------------------------------------------------------------------------- references


def dominates(a, b, dirs) -> bool:
    """a dominates b: no worse on every objective, strictly better on one (written out)."""
    no_worse = all((x >= y) if d == "max" else (x <= y) for x, y, d in zip(a, b, dirs))
    better = any((x > y) if d == "max" else (x < y) for x, y, d in zip(a, b, dirs))
    return no_worse and better


def brute_ranks(values, dirs) -> list[int]:
    """O(n^2)-per-front peeling in pure Python; rows with NaN get 0."""
    n = len(values)
    ranks = [0] * n
    remaining = {i for i in range(n) if not any(math.isnan(v) for v in values[i])}
    r = 0
    while remaining:
        r += 1
        front = {
            i
            for i in remaining
            if not any(dominates(values[j], values[i], dirs) for j in remaining)
        }
        for i in front:
            ranks[i] = r
        remaining -= front
    return ranks


def check_rank_properties(values, dirs, ranks) -> None:
    """The definition, independent of any peeling: rank k>1 rows have a rank k-1 dominator,
    and no row is dominated by a row of the same or a larger rank."""
    for i, ri in enumerate(ranks):
        if ri == 0:
            continue
        doms = [
            ranks[j]
            for j in range(len(values))
            if ranks[j] and dominates(values[j], values[i], dirs)
        ]
        assert all(rj < ri for rj in doms)
        if ri > 1:
            assert ri - 1 in doms


def rec(run_id, regularizer="jasmin", name="", **metrics):
    params = {
        "regularizer": regularizer,
        "k": "10",
        "lam": "0.001",
        "aggregation": "max",
        "lam_q": "0.01",
        "lam_k": "0.0",
        "lam_v": "0.001",
    }
    return {"run_id": run_id, "run_name": name, "metrics": metrics, "params": params}


# CIFAR-100, JaSMin paper Table 3 (clean, FGSM2, FGSM4, PGD2, PGD4, AA2); lip values synthetic.
PAPER = [
    ("none", None, 90.9, 46.39, 39.54, 26.85, 12.91, 2.12),
    ("specformer", (1e-2, 1e-2, 1e-2), 90.02, 44.12, 37.04, 27.55, 12.57, 3.01),
    ("specformer", (1e-2, 0, 0), 90.97, 45.87, 39.08, 28.38, 12.74, 2.61),
    ("specformer", (0, 1e-2, 0), 90.64, 46.04, 39.46, 29.29, 13.34, 2.57),
    ("specformer", (0, 0, 1e-2), 90.91, 47.0, 40.68, 29.39, 14.28, 2.39),
    ("specformer", (1e-3, 0, 0), 91.04, 47.6, 41.12, 28.22, 13.36, 2.16),
    ("specformer", (0, 0, 1e-3), 91.04, 47.48, 40.79, 28.27, 13.14, 2.1),
    ("specformer", (0, 1e-4, 0), 91.25, 46.91, 40.48, 28.57, 13.37, 1.98),
    ("jasmin", (0, 1e-2, "mean"), 89.0, 48.92, 41.86, 33.32, 18.97, 4.19),
    ("jasmin", (0, 1e-3, "mean"), 91.0, 47.7, 41.15, 28.99, 13.9, 2.12),
    ("jasmin", (10, 1e-2, "mean"), 89.1, 49.18, 42.49, 33.51, 19.58, 3.72),
    ("jasmin", (10, 1e-3, "mean"), 90.76, 48.57, 42.04, 30.19, 14.76, 2.56),
    ("jasmin", (30, 1e-3, "mean"), 90.85, 48.82, 42.43, 30.09, 15.31, 2.39),
    ("jasmin", (30, 1e-2, "max"), 86.52, 42.76, 36.03, 26.9, 14.41, 2.54),
    ("jasmin", (0, 1e-3, "max"), 90.92, 48.41, 41.98, 30.0, 14.91, 2.34),
    ("jasmin", (10, 1e-3, "max"), 90.94, 48.72, 42.28, 29.99, 15.39, 2.48),
    ("jasmin", (30, 1e-4, "max"), 91.1, 46.9, 40.53, 27.45, 12.52, 2.0),
]
ACC = ["acc_clean", "acc_fgsm_2", "acc_fgsm_4", "acc_pgd_2", "acc_pgd_4", "acc_aa_2"]


def paper_records():
    out = []
    for i, (reg, cfg, *acc) in enumerate(PAPER):
        params = {
            "regularizer": reg,
            "k": "0",
            "lam": "0.0",
            "aggregation": "max",
            "lam_q": "0.0",
            "lam_k": "0.0",
            "lam_v": "0.0",
        }
        if reg == "jasmin":
            params.update(k=str(cfg[0]), lam=str(cfg[1]), aggregation=cfg[2])
        elif reg == "specformer":
            params.update(lam_q=str(cfg[0]), lam_k=str(cfg[1]), lam_v=str(cfg[2]))
        metrics = dict(zip(ACC, acc), lip_jacobian_median=60.0 - 2 * acc[4] + (i % 5) * 0.7)
        out.append(
            {
                "run_id": f"run{i:02d}",
                "run_name": f"trial_{i:02d}",
                "metrics": metrics,
                "params": params,
            }
        )
    return out


# ---------------------------------------------------------------------------- ranks

dirs_st = st.lists(st.sampled_from(["max", "min"]), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), dirs=dirs_st)
def test_ranks_match_brute_force_with_ties(data, dirs):
    n = data.draw(st.integers(0, 30))
    rows = data.draw(
        st.lists(
            st.lists(st.integers(0, 3), min_size=len(dirs), max_size=len(dirs)),
            min_size=n,
            max_size=n,
        )
    )
    values = np.array(rows, dtype=float).reshape(n, len(dirs))
    ranks = non_dominated_ranks(values, dirs)
    assert ranks.tolist() == brute_ranks(values.tolist(), dirs)
    check_rank_properties(values.tolist(), dirs, ranks.tolist())


@pytest.mark.parametrize("seed", range(3))
def test_ranks_match_brute_force_across_chunks(seed):
    # 600 rows > the 512-row chunk of the dominance matrix; floats and integer ties mixed
    rng = np.random.default_rng(seed)
    m = 3
    values = np.where(
        rng.random((600, m)) < 0.5, rng.integers(0, 6, (600, m)), rng.normal(size=(600, m)).round(1)
    )
    dirs = ["max", "min", "max"]
    ranks = non_dominated_ranks(values, dirs)
    assert ranks.tolist() == brute_ranks(values.tolist(), dirs)
    assert ranks.max() > 3


@pytest.mark.parametrize("direction", ["max", "min"])
def test_single_objective_front_is_arg_extremum_set(direction):
    rng = np.random.default_rng(1)
    v = rng.integers(0, 8, 50).astype(float)
    ranks = non_dominated_ranks(v[:, None], [direction])
    best = v.max() if direction == "max" else v.min()
    assert set(np.flatnonzero(ranks == 1)) == set(np.flatnonzero(v == best))
    distinct = sorted(set(v), reverse=direction == "max")  # rank = dense rank of the value
    assert ranks.tolist() == [distinct.index(x) + 1 for x in v]


def test_identical_points_share_rank_and_nan_rows_are_left_out():
    v = np.array([[1, 5], [1, 5], [0, 4], [0, 4], [np.nan, 9], [2, np.nan]], dtype=float)
    ranks = non_dominated_ranks(v, ["max", "max"])
    assert ranks.tolist() == [1, 1, 2, 2, 0, 0]
    # NaN rows change nothing for the others
    assert non_dominated_ranks(v[:4], ["max", "max"]).tolist() == ranks[:4].tolist()
    # infinities are ordinary ordered values at this level
    inf = np.array([[np.inf], [5.0], [-np.inf]])
    assert non_dominated_ranks(inf, ["max"]).tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    "values,dirs,match",
    [
        (np.zeros(3), ["max"], "2-D"),
        (np.zeros((3, 2)), ["max"], "one of"),
        (np.zeros((3, 0)), [], "one of"),
        (np.zeros((3, 1)), ["up"], "'up'"),
    ],
)
def test_ranks_reject_bad_arguments(values, dirs, match):
    with pytest.raises(ValueError, match=match):
        non_dominated_ranks(values, dirs)


def test_pareto_rank_excludes_missing_and_non_finite_with_reasons():
    good = [
        rec(f"g{i}", acc_clean=90 - i, acc_pgd_4=10 + i, acc_aa_2=2.0, lip_jacobian_median=5.0)
        for i in range(4)
    ]
    bad = [
        rec("m", acc_clean=99, acc_pgd_4=99, acc_aa_2=9),  # missing lip
        rec("n", acc_clean=99, acc_pgd_4=float("nan"), acc_aa_2=9, lip_jacobian_median=0),
        rec("i", acc_clean=99, acc_pgd_4=99, acc_aa_2=9, lip_jacobian_median=-math.inf),
        rec("s", acc_clean="ninety", acc_pgd_4=99, acc_aa_2=9, lip_jacobian_median=0),
    ]
    res = pareto_rank(bad[:2] + good + bad[2:])
    assert res.ranks.tolist() == [0, 0, 1, 1, 1, 1, 0, 0]
    assert "lip_jacobian_median" in res.excluded["m"] and "missing" in res.excluded["m"]
    assert "acc_pgd_4 is nan" in res.excluded["n"]
    assert "lip_jacobian_median is -inf" in res.excluded["i"]
    assert "not a number" in res.excluded["s"]
    assert [t.run_id for t in res.front] == ["g0", "g1", "g2", "g3"]
    # numeric strings (as some stores return them) are read as numbers
    assert pareto_rank(
        [rec("x", acc_clean="90.5", acc_pgd_4=1, acc_aa_2=1, lip_jacobian_median=1)]
    ).ranks.tolist() == [1]


@pytest.mark.parametrize(
    "records,match",
    [
        ([{"metrics": {}}], "run_id"),
        ([rec("a"), rec("a")], "more than once"),
        (["a"], "mapping"),
        ([{"run_id": "a", "metrics": [1, 2]}], "mappings"),
    ],
)
def test_bad_records_raise(records, match):
    with pytest.raises(ValueError, match=match):
        pareto_rank(records)


# ---------------------------------------------------------------------------- objectives


def test_parse_objective_accepts_both_directions():
    assert parse_objective("acc_pgd_4:max") == Objective("acc_pgd_4", "max")
    assert parse_objective(" lip_jacobian_median : MIN ") == Objective("lip_jacobian_median", "min")
    assert str(parse_objective("acc_aa_2:max")) == "acc_aa_2:max"
    assert resolve_objectives(None) == DEFAULT_OBJECTIVES
    assert resolve_objectives("acc_clean:min") == (Objective("acc_clean", "min"),)
    assert [str(o) for o in DEFAULT_OBJECTIVES] == [
        "acc_clean:max",
        "acc_pgd_4:max",
        "acc_aa_2:max",
        "lip_jacobian_median:min",
    ]


@pytest.mark.parametrize(
    "spec,part",
    [
        ("acc_pgd_4", "no direction"),
        (":max", "no metric name"),
        ("acc:best", "'best'"),
        ("a:b:max", "more than one ':'"),
        ("bad,name:max", "'bad,name'"),
        (5, "5"),
        ("", "''"),
    ],
)
def test_parse_objective_errors_name_the_bad_part(spec, part):
    with pytest.raises(ConfigError) as err:
        parse_objective(spec)
    assert err.value.field == "objective" and part in str(err.value)


def test_resolve_objectives_rejects_duplicates():
    with pytest.raises(ConfigError, match="acc_clean"):
        resolve_objectives(["acc_clean:max", "acc_clean:min"])


# ---------------------------------------------------------------------------- selection


def brute_select(records, ranks, goal, within):
    """Reference: filter the front by each constraint, then sort by the documented key."""
    front = [r for r, k in zip(records, ranks) if k == 1]
    cands = list(front)
    for name, x in within:
        best = max(r["metrics"][name] for r in front)
        cands = [r for r in cands if r["metrics"][name] >= best - x - 1e-9]
    sign = -1 if goal[0] == "max" else 1
    return sorted(
        cands,
        key=lambda r: (
            sign * r["metrics"][goal[1]],
            -r["metrics"]["acc_aa_2"],
            r["metrics"]["lip_jacobian_median"],
            r["run_id"],
        ),
    )[0]


def test_default_rule_picks_the_papers_highlighted_jasmin_row():
    records = paper_records()
    objs = [parse_objective("acc_clean:max"), parse_objective("acc_pgd_4:max")]
    res = pareto_rank(records, objs)
    sel = select_from_front(records, res.ranks)  # pgd4-within-clean:1.0
    # best front clean 91.25 -> clean >= 90.25; the best PGD-4 there is JaSMin k=10, 1e-3, max
    assert config_label(records[sel.index]["params"]) == "JaSMin k=10 λ=1e-3 max"
    assert sel.run_id == records[sel.index]["run_id"] and "15.39" in sel.explanation
    # with 3 points of slack the k=10, 1e-2, mean row (89.10 / 19.58) qualifies instead
    sel3 = select_from_front(records, res.ranks, "pgd4-within-clean:3")
    assert config_label(records[sel3.index]["params"]) == "JaSMin k=10 λ=1e-2 mean"


@pytest.mark.parametrize("seed", range(20))
def test_selection_matches_reference_on_tied_integer_data(seed):
    rng = random.Random(seed)
    records = [
        rec(
            f"r{i:02d}",
            acc_clean=rng.randint(0, 4),
            acc_pgd_4=rng.randint(0, 4),
            acc_aa_2=rng.randint(0, 2),
            lip_jacobian_median=rng.randint(0, 2),
        )
        for i in range(rng.randint(1, 25))
    ]
    res = pareto_rank(records)
    for text, goal, within in [
        (DEFAULT_SELECT_RULE, ("max", "acc_pgd_4"), [("acc_clean", 1)]),
        ("max:acc_pgd_4", ("max", "acc_pgd_4"), []),
        ("min:lip_jacobian_median", ("min", "lip_jacobian_median"), []),
        ("max:acc_aa_2,within:acc_clean:0", ("max", "acc_aa_2"), [("acc_clean", 0)]),
    ]:
        want = brute_select(records, res.ranks, goal, within)
        assert select_from_front(records, res.ranks, text).run_id == want["run_id"]
        shuffled = list(zip(records, res.ranks))
        rng.shuffle(shuffled)
        recs2, ranks2 = zip(*shuffled)  # order of the records does not matter
        assert select_from_front(recs2, list(ranks2), text).run_id == want["run_id"]


def test_tie_break_chain():
    base = dict(acc_clean=90, acc_pgd_4=15)
    records = [
        rec("b", acc_aa_2=2, lip_jacobian_median=3, **base),
        rec("a", acc_aa_2=2, lip_jacobian_median=3, **base),
        rec("c", acc_aa_2=2, lip_jacobian_median=2, **base),
        rec("d", acc_aa_2=3, lip_jacobian_median=9, **base),
    ]
    objs = [Objective("acc_clean", "max"), Objective("acc_pgd_4", "max")]
    ranks = pareto_rank(records, objs).ranks  # all four share the front
    assert select_from_front(records, ranks).run_id == "d"  # higher AA first
    assert select_from_front(records[:3], ranks[:3]).run_id == "c"  # then lower Lipschitz
    assert select_from_front(records[:2], ranks[:2]).run_id == "a"  # then run_id


def test_within_min_constraint_and_shorthand_expansion():
    records = [
        rec("a", acc_clean=90, acc_pgd_4=20, acc_aa_2=1, lip_jacobian_median=9),
        rec("b", acc_clean=80, acc_pgd_4=10, acc_aa_2=1, lip_jacobian_median=1),
    ]
    ranks = pareto_rank(records).ranks
    assert ranks.tolist() == [1, 1]
    rule = "max:acc_pgd_4,within:min:lip_jacobian_median:0.5"
    assert select_from_front(records, ranks, rule).run_id == "b"
    a, b = (
        parse_selection_rule("pgd4-within-clean:2"),
        parse_selection_rule("max:acc_pgd_4,within:acc_clean:2"),
    )
    assert (a.goal, a.within) == (b.goal, b.within)
    assert parse_selection_rule("pgd4-within-clean").within[0][1] == 1.0


@pytest.mark.parametrize(
    "rule,part",
    [
        ("", "non-empty"),
        ("best:acc_pgd_4", "'best:acc_pgd_4'"),
        ("max", "goal 'max'"),
        ("max:acc_pgd_4,near:acc_clean:1", "'near:acc_clean:1'"),
        ("pgd4-within-clean:-1", "'-1'"),
        ("pgd4-within-clean:abc", "'abc'"),
        ("max:acc_pgd_4,within:acc_clean", "within:METRIC:X"),
        ("max:acc_pgd_4,within:up:acc_clean:1", "'within:up:acc_clean:1'"),
        ("max:bad!name", "bad!name"),
    ],
)
def test_rule_parse_errors_name_the_rule(rule, part):
    with pytest.raises(ConfigError) as err:
        parse_selection_rule(rule)
    assert err.value.field == "select" and part in str(err.value)


def test_selection_runtime_errors():
    records = [rec("a", acc_clean=1, acc_pgd_4=1, acc_aa_2=1, lip_jacobian_median=1)]
    with pytest.raises(ValueError, match="no run has rank 1"):
        select_from_front(records, [0])
    with pytest.raises(ValueError, match="acc_fgsm_2"):
        select_from_front(records, [1], "max:acc_fgsm_2")
    with pytest.raises(ValueError, match="acc_pgd_2"):
        select_from_front(records, [1], "max:acc_pgd_4,within:acc_pgd_2:1")
    two = [
        rec("a", acc_clean=9, acc_pgd_4=1, acc_aa_2=1, lip_jacobian_median=9),
        rec("b", acc_clean=1, acc_pgd_4=1, acc_aa_2=1, lip_jacobian_median=1),
    ]
    with pytest.raises(ValueError, match="meets all"):  # each constraint keeps a different run
        select_from_front(
            two, [1, 1], "max:acc_pgd_4,within:acc_clean:1,within:min:lip_jacobian_median:1"
        )
    with pytest.raises(ValueError, match=r"per record \(1\)"):
        select_from_front(records, [1, 1])


# ---------------------------------------------------------------------------- table and JSON


def _columns(table: str) -> tuple[list[str], list[list[str]]]:
    """Split the table into cells using the spans of the dashed separator line."""
    lines = table.splitlines()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    cut = lambda s: [s[a:b].strip() for a, b in spans]  # noqa: E731
    body = [ln for ln in lines[2:] if re.match(r"\s*\d+  ", ln)]  # not the count line
    return cut(lines[0].ljust(len(lines[1]))), [cut(ln.ljust(len(lines[1]))) for ln in body]


def test_front_table_lists_the_front_with_applicable_params():
    records = paper_records() + [rec("zzbroken", acc_clean=99)]
    res = pareto_rank(records)
    table = build_front(records, per_run=True).table
    assert table == format_front_table(
        res.trials, res.ranks, res.values, res.excluded, res.objectives
    )
    head, rows = _columns(table)
    front_ids = {t.run_id[:8] for t in res.front}
    assert {r[head.index("run_id")] for r in rows} == front_ids and len(rows) == len(front_ids)
    for row in rows:
        reg = row[head.index("regularizer")]
        for p in ("k", "lam", "aggregation"):
            assert (row[head.index(p)] != "") == (reg == "jasmin")
        for p in ("lam_q", "lam_k", "lam_v"):
            assert (row[head.index(p)] != "") == (reg == "specformer")
    vals = [float(r[head.index("acc_clean(max)")]) for r in rows]
    assert vals == sorted(vals, reverse=True)
    assert "not ranked: zzbroken (missing metrics acc_pgd_4, acc_aa_2" in table
    table2 = format_front_table(
        res.trials, res.ranks, res.values, res.excluded, res.objectives, max_rank=2
    )
    _, rows2 = _columns(table2)
    assert len(rows2) == int(((res.ranks == 1) | (res.ranks == 2)).sum())


def test_pareto_json_is_strict_json_and_order_independent():
    records = paper_records() + [
        rec("nan-run", acc_clean=float("nan"), acc_pgd_4=1, acc_aa_2=1, lip_jacobian_median=1),
        rec("inf-run", acc_clean=1, acc_pgd_4=1, acc_aa_2=1, lip_jacobian_median=math.inf),
    ]
    res = pareto_rank(records)
    sel = select_from_front(records, res.ranks)
    doc = build_front(records, rule=DEFAULT_SELECT_RULE, per_run=True).as_json()
    text = json.dumps(doc, allow_nan=False, sort_keys=True)
    perm = list(range(len(records)))
    random.Random(0).shuffle(perm)
    recs2 = [records[i] for i in perm]
    doc2 = build_front(recs2, rule=DEFAULT_SELECT_RULE, per_run=True).as_json()
    assert json.dumps(doc2, allow_nan=False, sort_keys=True) == text
    assert doc["front"] == sorted(t.run_id for t in res.front)
    assert doc["counts"] == {
        "runs": len(records),
        "ranked": len(records) - 2,
        "front": len(res.front),
        "excluded": 2,
    }
    assert {e["run_id"] for e in doc["excluded"]} == {"nan-run", "inf-run"}
    assert doc["selection"]["run_id"] == sel.run_id
    assert [r["rank"] for r in doc["runs"]][-2:] == [0, 0]


def test_config_labels():
    p = {"regularizer": "specformer", "lam_q": "0.01", "lam_k": "0.0", "lam_v": "0.001", "k": "10"}
    assert config_label(p) == "Specformer (1e-2, 0, 1e-3)"
    assert config_label({"regularizer": "none", "k": "3"}) == "baseline"
    assert (
        config_label({"regularizer": "jasmin", "k": 0, "lam": 0.0001, "aggregation": "mean"})
        == "JaSMin k=0 λ=1e-4 mean"
    )


# ---------------------------------------------------------------------------- figures


def _png(path):
    import matplotlib.image as mpimg

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    return mpimg.imread(path)[..., :3]


def _has_colour(img, hex_colour, tol=0.03, min_pixels=20) -> bool:
    rgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(img - rgb).max(axis=-1) < tol).sum()) >= min_pixels


def test_figures_for_a_typical_sweep(tmp_path):
    records = paper_records()
    res = pareto_rank(records)
    sel = select_from_front(records, res.ranks)
    out = scatter_front(
        records,
        res.ranks,
        path=tmp_path / "sub" / "scatter.png",
        selected=sel.run_id,
        objectives=res.objectives,
    )
    img = _png(out)
    assert img.shape[1] > 1000
    for colour in ("#0072B2", "#E69F00", "#D55E00"):  # JaSMin, Specformer, the selected star
        assert _has_colour(img, colour)
    out = parallel_coordinates(
        records, res.ranks, res.objectives, tmp_path / "par.png", selected=sel.run_id
    )
    assert _png(out).shape[1] > 1000
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["par.png", "scatter.png", "sub"]


@pytest.mark.parametrize("case", ["single", "identical", "no_regularizer", "none_ranked"])
def test_figures_for_degenerate_sweeps(tmp_path, case):
    m = dict(
        acc_clean=90.0,
        acc_fgsm_2=40.0,
        acc_fgsm_4=30.0,
        acc_pgd_2=20.0,
        acc_pgd_4=10.0,
        acc_aa_2=2.0,
        lip_jacobian_median=5.0,
    )
    records = {
        "single": [rec("only", **m)],
        "identical": [rec(f"r{i}", **m) for i in range(3)],
        "no_regularizer": [
            {"run_id": "r0", "metrics": m},
            {"run_id": "r1", "metrics": m, "params": {"regularizer": "new"}},
        ],
        "none_ranked": [rec("r0", acc_clean=90.0)],
    }[case]
    res = pareto_rank(records)
    img = _png(scatter_front(records, res.ranks, path=tmp_path / "s.png"))
    assert _has_colour(img, "#0072B2") == (case in ("single", "identical"))
    _png(parallel_coordinates(records, res.ranks, res.objectives, tmp_path / "p.png"))
    objs = [Objective("acc_clean", "max")]
    _png(parallel_coordinates(records, pareto_rank(records, objs).ranks, objs, tmp_path / "1.png"))


# ---------------------------------------------------------------- pareto on a real store
@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_an_infinite_metric_is_never_ranked_nor_tagged_pareto(tmp_path, caplog, bad):
    """MLflow stores inf as 1.798e308. Such a run is neither ranked first nor tagged
    pareto=true, and pareto (scatter plot included) finishes with acc_clean = inf."""
    import logging

    from _sweep_helpers import finished_trials_store

    from lipsweep.__main__ import main
    from lipsweep.tracking import TrackingReader

    runs = [
        ({"regularizer": "none", "seed": "0"}, {"acc_clean": 80.0, "acc_pgd_4": 10.0}),
        ({"regularizer": "jasmin", "k": "0", "seed": "0"}, {"acc_clean": 70.0, "acc_pgd_4": 20.0}),
        ({"regularizer": "jasmin", "k": "10", "seed": "0"}, {"acc_clean": bad, "acc_pgd_4": 30.0}),
    ]
    uri, ids = finished_trials_store(tmp_path, runs)
    caplog.set_level(logging.WARNING)
    argv = ["pareto", "--experiment", "x", "--tracking-uri", uri]
    assert main([*argv, "--objective", "acc_clean:max", "--objective", "acc_pgd_4:max"]) == 0
    reader = TrackingReader(uri, "x")
    tags = {rid: reader.get_run(rid).data.tags for rid in ids}
    assert [tags[r]["pareto"] for r in ids] == ["true", "true", "false"]
    assert tags[ids[2]]["pareto_rank"] == "0"
    shown = "inf" if bad > 0 else "-inf"
    assert f"run {ids[2]} is left out of the ranking and the front: acc_clean is {shown}" in (
        caplog.text
    )


# ------------------------------------------- `lipsweep pareto` on the session's four-trial sweep
# (conftest.four_trial_sweep: a real sweep on Ray, so these are slow and in the "ray" group)
def _sweep_state(d):
    from pathlib import Path

    from lipsweep.tracking import TrackingReader

    c = TrackingReader(f"sqlite:///{d / 'mlflow.db'}", "exp")
    rs = c.runs()
    kids = sorted(
        (r for r in rs if r.data.tags.get("lipsweep.kind") == "trial"), key=lambda r: r.info.run_id
    )
    parent = next(r for r in rs if r.data.tags.get("lipsweep.kind") == "sweep")
    tags = [
        (r.info.run_id, r.data.tags.get("pareto"), r.data.tags.get("pareto_rank")) for r in kids
    ]
    arts = sorted(a.path for a in c.list_artifacts(parent.info.run_id, "pareto"))
    doc = json.loads(
        Path(
            c.download_artifacts(parent.info.run_id, "pareto/pareto.json", str(d / "dl"))
        ).read_text()
    )
    return tags, arts, doc


@pytest.mark.slow
@pytest.mark.ray
def test_pareto_tags_runs_logs_artifacts_and_is_idempotent(swept):
    from _sweep_helpers import lipsweep_cli as cli

    out1 = cli(swept, "pareto", "--experiment", "exp").stdout
    first = _sweep_state(swept)
    out2 = cli(swept, "pareto", "--experiment", "exp").stdout
    second = _sweep_state(swept)
    assert first == second and out1 == out2
    tags, arts, doc = first
    assert all(t[1] in ("true", "false") for t in tags) and any(t[1] == "true" for t in tags)
    assert {"pareto/pareto.json", "pareto/pareto_scatter.png", "pareto/pareto_parallel.png"} <= set(
        arts
    )
    assert doc["counts"]["runs"] == 4
    assert "rank" in out1 and "acc_pgd_4" in out1


@pytest.mark.slow
@pytest.mark.ray
def test_bad_review_input_exits_2(swept):
    from _sweep_helpers import lipsweep_cli as cli

    p = cli(swept, "pareto", "--experiment", "nope", check=False)
    assert p.returncode == 2 and "no experiment 'nope'" in p.stderr
    objective = ["pareto", "--experiment", "exp", "--objective"]
    p = cli(swept, *objective, "acc_bogus:max", check=False)
    assert p.returncode == 2 and "available metrics" in p.stderr and "acc_pgd_4" in p.stderr
    p = cli(swept, *objective, "acc_clean:up", check=False)
    assert p.returncode == 2
    p = cli(
        swept,
        "export",
        "--experiment",
        "exp",
        "--out",
        str(swept / "x"),
        "--select",
        "best:acc",
        check=False,
    )
    assert p.returncode == 2 and not (swept / "x").exists()


@pytest.mark.slow
def test_experiment_without_finished_runs_exits_2(tmp_path):
    from _sweep_helpers import lipsweep_cli as cli
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").create_experiment("empty")
    p = cli(tmp_path, "pareto", "--experiment", "empty", check=False)
    assert p.returncode == 2 and "no FINISHED trial runs" in p.stderr
