"""Arms over seeds (lipsweep.decide.arms) on a real MLflow SQLite store, against numbers worked
out by hand; `pareto` over arms and `report` on the same store (no sweep: the runs are logged
directly, so this stays fast)."""

from __future__ import annotations

import logging
import math
import re

import pytest
from _sweep_helpers import empty_store

from lipsweep.__main__ import main
from lipsweep.decide.arms import (
    arm_stats,
    group_arms,
    holm,
    paired_difference,
    paired_relative,
    paired_t,
    paired_t_power,
    seeds_for_power,
    t_interval,
)

# t quantiles (two-sided 95%): df=2 has the closed form (2p-1)/sqrt(2p(1-p)) at p=0.975,
# 0.95/sqrt(0.04875) = 4.302653; df=3: 3.182446 (any t table).
T2, T3 = 4.302653, 3.182446
BASE = {"regularizer": "none", "lr": "0.001", "epochs": "1"}
JAS = {
    "regularizer": "jasmin",
    "k": "10",
    "lam": "0.01",
    "aggregation": "mean",
    "lr": "0.001",
    "epochs": "1",
}
# (params, seed, acc_clean, acc_pgd_4); the third JaSMin run writes lam as 1e-2 (same arm)
RUNS = [
    (BASE, 0, 30.0, 4.0),
    (BASE, 1, 32.0, 5.0),
    (BASE, 2, 34.0, 6.0),
    (JAS, 0, 29.0, 5.0),
    (JAS, 1, 31.0, 7.0),
    ({**JAS, "lam": "1e-2"}, 2, 33.0, 9.0),
    ({**JAS, "k": "0"}, 0, 31.5, 2.0),
]


def test_t_interval_and_paired_t_by_hand():
    s = t_interval([1.0, 2.0, 3.0, 6.0])
    # mean 3; var (4+1+0+9)/3 = 14/3; se = sqrt(14/3)/2 = 1.080123; half = T3 * se = 3.437433
    assert (s.n, s.mean) == (4, 3.0)
    assert s.std == pytest.approx(math.sqrt(14 / 3))
    assert (s.lo, s.hi) == pytest.approx((3 - 3.437433, 3 + 3.437433), abs=1e-5)
    d = paired_t([1.0, 2.0, 3.0])
    # mean 2, std 1, se 1/sqrt(3), t = 2 sqrt(3) = 3.4641; df=2: P(T > t) = 1/2 - t/(2
    # sqrt(2 + t^2)) = 0.5 - 3.4641/7.483315 = 0.037088, p = 0.074180; half = T2/sqrt(3)
    assert d.p == pytest.approx(0.0741799, abs=1e-6)
    assert (d.lo, d.hi) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-5)
    assert math.isnan(t_interval([5.0]).lo) and t_interval([]).n == 0
    assert math.isnan(paired_t([1.0, 1.0]).p)  # zero spread: no t statistic


def test_holm_by_hand():
    # m = 3 finite: sorted 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04, raised to the
    # running max 0.06); NaN passes through and does not count; a product over 1 is capped
    assert holm([0.04, 0.01, math.nan, 0.03]) == pytest.approx(
        [0.06, 0.03, math.nan, 0.06], nan_ok=True
    )
    assert holm([0.6, 0.5]) == [1.0, 1.0] and holm([]) == [] and holm([0.2]) == [0.2]


def test_power_and_seeds_match_published_values():
    # G*Power / Cohen (1988), one-sample (paired) t-test, two-sided alpha 0.05, power 0.8:
    # d = 1.0 -> n = 10 (power 0.8031), d = 0.8 -> 15 (0.8213), d = 0.5 -> 34 (0.8078)
    assert paired_t_power(10, 1.0, 0.05) == pytest.approx(0.8031, abs=1e-4)
    assert paired_t_power(15, 0.8, 0.05) == pytest.approx(0.8213, abs=1e-4)
    assert paired_t_power(34, 0.5, 0.05) == pytest.approx(0.8078, abs=1e-4)
    assert paired_t_power(9, 1.0, 0.05) < 0.8 < paired_t_power(10, 1.0, 0.05)
    # differences with mean/sd = 1 and 0.5 (sign does not matter)
    assert seeds_for_power([0.0, 0.5, 1.0], 0.05) == 10
    assert seeds_for_power([0.5, -0.5, -1.5], 0.05) == 34
    assert seeds_for_power([0.5, -0.5, -1.5], 0.05, max_n=20) == 21  # more than max_n
    assert seeds_for_power([1.0], 0.05) is None  # one pair: no spread to plan with
    assert seeds_for_power([1.0, 1.0], 0.05) is None and seeds_for_power([-1.0, 1.0], 0.05) is None


def test_a_constant_difference_up_to_rounding_has_no_t_test():
    """Accuracies 100 * count / 500 with the arm exactly 3 images better on every
    seed differ by 0.5999999999999943 or 0.6000000000000085 (float rounding), std 7.8e-15:
    a t-test called that p = 6.8e-57 and seed planning asked for > 200 seeds."""
    base_counts = [412, 407, 415, 398, 421]
    diffs = [100 * (c + 3) / 500 - 100 * c / 500 for c in base_counts]
    assert len(set(diffs)) > 1 and 0 < t_interval(diffs).std < 1e-13  # the trap is real
    for n in (2, 5):
        s = paired_t(diffs[:n])
        assert s.mean == pytest.approx(0.6) and math.isnan(s.p)
        assert seeds_for_power(diffs[:n], 0.05) is None
    # a real spread of one image (0.2 points) is still tested: mean 0.64, std 0.0894427,
    # t = 0.64 / (0.0894427 / sqrt 5) = 16.0; df 4: p = 2 P(T > 16) = 8.9e-5 (t table)
    real = [100 * (c + 3 + (i == 0)) / 500 - 100 * c / 500 for i, c in enumerate(base_counts)]
    assert paired_t(real).p == pytest.approx(8.9e-5, rel=0.01)
    assert seeds_for_power(real, 0.05) == 3  # d = 7.16: power 0.573 at n = 2 (mpmath)


def _mpmath_power(n: int, d: float, alpha: float) -> float:
    """Power of the two-sided paired t-test by direct integration in mpmath (independent of
    scipy's noncentral t): T = (Z + d sqrt n) / sqrt(V / (n-1)), V ~ chi2(n-1), so
    P(|T| > c) = E_V[1 - Phi(c s - nc) + Phi(-c s - nc)] with s = sqrt(V / (n-1))."""
    import mpmath as mp
    from scipy.stats import t as student_t

    mp.mp.dps = 30
    df, nc = n - 1, mp.mpf(d) * mp.sqrt(n)
    c, half = mp.mpf(float(student_t.ppf(1 - alpha / 2, df))), mp.mpf(df) / 2

    def integrand(v):
        if v == 0:
            return mp.zero  # an endpoint: integrable (df = 1) or zero density
        s = mp.sqrt(v / df)
        dens = mp.exp((half - 1) * mp.log(v) - v / 2 - half * mp.log(2) - mp.loggamma(half))
        return (1 - mp.ncdf(c * s - nc) + mp.ncdf(-c * s - nc)) * dens

    return float(mp.quad(integrand, [0, df, 4 * df, 20 * df + 50, mp.inf]))


@pytest.mark.parametrize(
    "n,d,alpha",
    [
        (2, 5.477, 0.05),
        (3, 5.477, 0.05),
        (4, 5.477, 0.05),
        (5, 5.477, 0.05),
        (2, 20.0, 0.05),
        (3, 3.0, 0.001),
        (10, 1.0, 0.05),
        (4, 0.3, 0.01),
    ],
)
def test_power_against_an_mpmath_integral(n, d, alpha):
    """Scipy's nct.cdf(-crit, df, nc) is NaN at large nc; the power is not."""
    assert paired_t_power(n, d, alpha) == pytest.approx(_mpmath_power(n, d, alpha), abs=1e-9)


def test_seeds_for_large_effects():
    """d = 5.477: power 0.46 at n = 2 and 0.988 at 3 (mpmath, test above), so 3 seeds, not 6;
    d = 20 at alpha 0.05: 2, not 3; d = 3 at alpha 0.001: 7, not 9 (powers by mpmath)."""
    for d, alpha, want in ((5.477, 0.05, 3), (20.0, 0.05, 2), (3.0, 0.001, 7)):
        diffs = [d - 1.0, d, d + 1.0]  # mean d, sd 1
        assert seeds_for_power(diffs, alpha) == want
        assert 0.8 <= _mpmath_power(want, d, alpha)
        assert want == 2 or _mpmath_power(want - 1, d, alpha) < 0.8  # 2 is the least n


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A real MLflow SQLite store: a parent sweep run and the RUNS as FINISHED trial runs."""
    from mlflow.tracking import MlflowClient

    d = tmp_path_factory.mktemp("arms")
    uri = empty_store(d / "mlflow.db")
    c = MlflowClient(uri)
    exp = c.create_experiment("arms", artifact_location=(d / "artifacts").as_uri())
    parent = c.create_run(exp, tags={"lipsweep.kind": "sweep"}).info.run_id
    for i, (params, seed, clean, pgd) in enumerate(RUNS):
        run = c.create_run(
            exp, run_name=f"t{i}", tags={"lipsweep.kind": "trial", "mlflow.parentRunId": parent}
        )
        rid = run.info.run_id
        for k, v in {**params, "seed": str(seed)}.items():
            c.log_param(rid, k, v)
        for k, v in {
            "acc_clean": clean,
            "acc_pgd_4": pgd,
            "acc_aa_2": pgd / 2,
            "lip_jacobian_median": 10 - pgd,
        }.items():
            c.log_metric(rid, k, v)
        c.set_terminated(rid, "FINISHED")
    return d, uri, c


def _records(uri: str):
    from lipsweep.decide.sweep_runs import load_sweep_runs, read_tracker

    return load_sweep_runs(read_tracker(uri, "arms")).records


def test_arms_from_mlflow_match_a_hand_computation(store):
    _, uri, _ = store
    arms = group_arms(_records(uri))
    assert [(a.name, a.seeds) for a in arms] == [
        ("baseline", [0, 1, 2]),
        ("JaSMin k=0 λ=1e-2 mean", [0]),
        ("JaSMin k=10 λ=1e-2 mean", [0, 1, 2]),
    ]  # 0.01 and 1e-2: one arm
    base, jas = arms[0], arms[2]
    s = arm_stats(jas, "acc_pgd_4")  # 5, 7, 9
    assert (s.n, s.mean, s.std) == (3, 7.0, 2.0)
    assert (s.lo, s.hi) == pytest.approx(
        (7 - T2 * 2 / math.sqrt(3), 7 + T2 * 2 / math.sqrt(3)), abs=1e-5
    )
    d = paired_difference(jas, base, "acc_pgd_4")  # 1, 2, 3 (see the test above)
    assert (d.n, d.mean, d.std) == (3, 2.0, 1.0)
    assert d.p == pytest.approx(0.0741799, abs=1e-6)
    c = paired_difference(jas, base, "acc_clean")  # -1, -1, -1: std 0, no p
    assert (c.mean, c.std, math.isnan(c.p)) == (-1.0, 0.0, True)
    assert paired_difference(arms[1], base, "acc_pgd_4").n == 1
    # relative, on lip_jacobian_median = 10 - pgd: base (6, 5, 4), k=10 (5, 3, 1), so
    # 100 (a/b - 1) = (-16.667, -40, -75), mean -43.889, std 29.3605 (by hand), t = -2.58912,
    # p = 2 (1/2 - |t| / (2 sqrt(2 + t^2))) = 0.122385, half = T2 * 29.3605 / sqrt(3)
    r = paired_relative(jas, base, "lip_jacobian_median")
    assert (r.n, r.mean, r.std) == pytest.approx((3, -43.888889, 29.360467))
    assert r.p == pytest.approx(0.1223847, abs=1e-6)
    assert (r.lo, r.hi) == pytest.approx((-116.82434, 29.04656), abs=1e-4)
    # the absolute test on the same values: (-1, -2, -3), a different p (0.074)
    assert paired_difference(jas, base, "lip_jacobian_median").p == pytest.approx(0.0741799)


def test_pareto_ranks_arms_tags_runs_and_per_run_keeps_runs(store, capsys, monkeypatch):
    d, uri, c = store
    monkeypatch.chdir(d)
    assert main(["pareto", "--experiment", "arms", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    # means (clean, pgd4, aa2, lip): baseline (32, 5, 2.5, 5) and k=10 (31, 7, 3.5, 3) on the
    # front; k=0 (31.5, 2, 1, 8) is dominated by the baseline's means: rank 2
    assert "2 of 3 ranked arms on the front" in out and "JaSMin k=10 λ=1e-2 mean" in out
    assert "7.00 [2.03, 11.97]" in out  # 7 +- T2 * 2 / sqrt(3)
    # rule: within 1 point of the best mean clean (32) both front arms; higher mean PGD 4: k=10;
    # its run closest to the mean PGD 4 (5, 7, 9 -> 7) is seed 1's
    assert "arm 'JaSMin k=10" in out and "seed 1" in out
    exp = c.get_experiment_by_name("arms").experiment_id
    kids = c.search_runs([exp], "tags.`lipsweep.kind` = 'trial'")
    tags = {r.info.run_name: r.data.tags for r in kids}
    assert {t["arm"] for t in tags.values()} == {
        "baseline",
        "JaSMin k=0 λ=1e-2 mean",
        "JaSMin k=10 λ=1e-2 mean",
    }
    assert {n: (t["arm_rank"], t["arm_front"], t["pareto"]) for n, t in tags.items()} == {
        **{f"t{i}": ("1", "true", "true") for i in range(6)},
        "t6": ("2", "false", "false"),
    }
    assert main(["pareto", "--experiment", "arms", "--tracking-uri", uri, "--per-run"]) == 0
    out = capsys.readouterr().out
    assert "ranked runs on the front" in out and "[" not in out.split("\n")[2]
    kids = {
        r.info.run_name: r.data.tags for r in c.search_runs([exp], "tags.`lipsweep.kind` = 'trial'")
    }
    # per run, t0 (30, 4, 2, 6) is dominated by t1 (32, 5, 2.5, 5); its arm stays on the front
    assert kids["t0"]["pareto"] == "false" and kids["t0"]["arm_front"] == "true"


def test_report_writes_markdown_with_paired_stats(store, capsys, monkeypatch):
    d, uri, c = store
    monkeypatch.chdir(d)
    assert (
        main(["report", "--experiment", "arms", "--tracking-uri", uri, "--out", str(d / "rep")])
        == 0
    )
    md = (d / "rep" / "report.md").read_text()
    assert "| JaSMin k=10 λ=1e-2 mean | 3 | 0, 1, 2 | 1 | 31.00 ± 2.00 |" in md
    # Δ PGD 4 = (1, 2, 3): +2.00 [-0.48, +4.48] p=0.074; Δ clean = -1 every seed: no t-test
    assert "+2.00 [-0.48, +4.48] p=0.074" in md
    assert "-1.00 (same in every pair: no t-test)" in md
    # relative median ||J_f|| (see the hand computation above), in percent
    assert "| JaSMin k=10 λ=1e-2 mean | 3 | -43.9 [-116.8, +29.0] % p=0.122 |" in md
    assert "| JaSMin k=0 λ=1e-2 mean | 1 | +33.3 % (1 pair) |" in md  # 8 / 6 - 1
    # Holm: the absolute table has 3 tests (PGD 4, AA 2, ||J_f|| of k=10), each p = 0.0741799,
    # so each adjusted p = 3 x 0.0741799 = 0.2225; the relative table has one, p = 0.1224
    assert "over the 3 tests of this table (family-wise 5 %): none stays below 0.05 " in md
    assert "(smallest adjusted p=0.223: JaSMin k=10 λ=1e-2 mean, Δ" in md
    assert "over the 1 test of this table (family-wise 5 %): none stays below 0.05 " in md
    # how many seeds: 3 tests (PGD 4, AA 2, relative ||J_f||; clean has no spread) at 0.05 / 3
    assert "at 0.05 / 3 = 0.0167 (Bonferroni" in md
    row = md.split("### How many seeds")[1].split("\n| JaSMin k=10 λ=1e-2 mean | 3 | ")[1]
    want = [seeds_for_power(v, 0.05 / 3) for v in ([1, 2, 3], [0.5, 1, 1.5], [-1 / 6, -0.4, -0.75])]
    assert row.split(" |\n")[0] == " | ".join(["-"] + [str(n) for n in want])
    assert (d / "rep" / "pareto_scatter.png").stat().st_size > 1000
    assert (d / "rep" / "paired_differences.png").stat().st_size > 1000
    assert "![Paired differences](paired_differences.png)" in md
    assert "No run logged finite values in `lipschitz/lipschitz.npz`" in md
    parent = c.search_runs(
        [c.get_experiment_by_name("arms").experiment_id], "tags.`lipsweep.kind` = 'sweep'"
    )[0].info.run_id
    assert {a.path for a in c.list_artifacts(parent, "report")} >= {"report/report.md"}


def test_report_out_must_be_a_folder(store, capsys, tmp_path):
    _, uri, _ = store
    (tmp_path / "f").write_text("x")
    assert (
        main(
            ["report", "--experiment", "arms", "--tracking-uri", uri, "--out", str(tmp_path / "f")]
        )
        == 2
    )
    assert "--out" in capsys.readouterr().err


def test_holm_sentence_names_what_survives_the_correction():
    from lipsweep.decide.report import holm_sentence

    # 5 seeds; ||J_f|| halved on every seed (-50 +- 1 %: survives), per margin noise (does not)
    rel_j, rel_m = [-50.0, -51.0, -49.0, -50.5, -49.5], [-10.0, 20.0, -5.0, 15.0, 0.0]
    recs = []
    for s, (rj, rm) in enumerate(zip(rel_j, rel_m)):
        b = {"lip_jacobian_median": 4.0 + s, "lip_jacobian_per_margin_median": 10.0 + s}
        recs.append({"run_id": f"b{s}", "params": {**BASE, "seed": s}, "metrics": b})
        m = {k: v * (1 + r / 100) for (k, v), r in zip(b.items(), (rj, rm))}
        recs.append({"run_id": f"j{s}", "params": {**JAS, "seed": s}, "metrics": m})
    base, jas = group_arms(recs)
    p_j = paired_relative(jas, base, "lip_jacobian_median").p
    p_m = paired_relative(jas, base, "lip_jacobian_per_margin_median").p
    assert p_j < 1e-6 and p_m > 0.5  # so Holm over 2: 2 p_j, and max(2 p_j, p_m) = p_m
    line = holm_sentence([base, jas], base, relative=True)
    assert line.startswith("Holm's correction over the 2 tests of this table")
    assert f"JaSMin k=10 λ=1e-2 mean, Δ median ‖J_f‖ (relative): adjusted p={2 * p_j:.1e}." in line
    assert "margin" not in line


def test_report_shows_confirmed_standard_autoattack_with_its_own_n():
    """`lipsweep confirm` logs acc_aa_std_2 on the runs it confirmed, often not every seed: the
    report shows it with the count of runs behind each mean, and pairs only confirmed seeds."""
    from lipsweep.decide.report import arm_markdown, holm_sentence, paired_markdown

    metrics = [
        (BASE, 0, {"acc_clean": 30.0, "acc_aa_std_2": 10.0}),
        (BASE, 1, {"acc_clean": 32.0, "acc_aa_std_2": 14.0}),
        (JAS, 0, {"acc_clean": 31.0, "acc_aa_std_2": 13.0}),
        (JAS, 1, {"acc_clean": 33.0}),  # not confirmed
    ]
    recs = [
        {"run_id": f"r{i}", "params": {**p, "seed": s}, "metrics": m}
        for i, (p, s, m) in enumerate(metrics)
    ]
    base, jas = group_arms(recs)
    table = arm_markdown([base, jas], [1, 1])
    assert "| clean | AA std 2 |" in table
    # baseline: (10, 14) -> 12.00 +- 2.83; JaSMin: one of its two runs confirmed
    assert "| baseline | 2 | 0, 1 | 1 | 31.00 ± 1.41 | 12.00 ± 2.83 |" in table
    assert "| JaSMin k=10 λ=1e-2 mean | 2 | 0, 1 | 1 | 32.00 ± 1.41 | 13.00 (n=1) |" in table
    # Δ clean (1, 1) has no spread and Δ AA std 2 one pair: no test, and the report says why
    assert "(no spread)" in holm_sentence([base, jas], base)
    one_seed = group_arms([recs[0], recs[2]])
    assert holm_sentence(one_seed, one_seed[0]).startswith("One seed per pair: no interval")
    paired = paired_markdown([base, jas], base)
    assert "| Δ AA std 2 |" in paired and "| +3.00 (1 pair) |" in paired  # seed 0: 13 - 10


def test_pareto_and_report_build_the_front_once(store, monkeypatch, tmp_path):
    """Each command builds one front (lipsweep.decide.front), and ranks the runs and the arms
    once each inside it; the tags, artifacts, table and figures all read that front."""
    from pathlib import Path

    from lipsweep import api
    from lipsweep.decide import front as front_module
    from lipsweep.decide import pareto as pareto_module
    from lipsweep.decide import plots

    _, uri, c = store
    drawn: list[str] = []  # figures built, not rendered: what they are drawn from is the point
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append(Path(path).name) or path)
    calls = {"build_front": 0, "pareto_rank": 0}

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(front_module, "build_front")
    counted(front_module, "pareto_rank")
    monkeypatch.setattr(pareto_module, "pareto_rank", front_module.pareto_rank)
    res = api.pareto(experiment="arms", tracking_uri=uri)
    assert calls == {"build_front": 1, "pareto_rank": 2}  # the runs, then the arms' means
    assert res.ranked_by == "arms" and res.pick.run_id == res.ranking.selection.run_id
    exp = c.get_experiment_by_name("arms").experiment_id
    tagged = {r.info.run_id for r in c.search_runs([exp], "tags.pareto = 'true'")}
    assert tagged == {rid for rid, k in res.ranks.items() if k == 1}
    api.report(experiment="arms", tracking_uri=uri, out=str(tmp_path / "rep"))
    assert calls == {"build_front": 2, "pareto_rank": 4}
    assert drawn == [
        "pareto_scatter.png",
        "pareto_parallel.png",
        "paired_differences.png",
        "pareto_scatter.png",
    ]


def test_an_interval_is_clipped_to_the_values_its_metric_can_take():
    """Two seeds: t_{0.975, 1} = 12.7062, so the half-width is 12.7062 * std / sqrt 2 =
    6.3531 * |a - b|. acc_pgd_4 10 and 20: mean 15, half 63.53, [-48.53, 78.53] -> [0, 78.53];
    acc_clean 95 and 99: mean 97, half 25.41, [71.59, 122.41] -> [71.59, 100];
    lip_jacobian_median 1 and 3: mean 2, half 12.71, [-10.71, 14.71] -> [0, 14.71]; a metric
    of unknown range keeps the t-interval."""
    from lipsweep.decide.arms import metric_bounds, metric_interval

    acc = metric_interval([10.0, 20.0], "acc_pgd_4")
    assert (acc.mean, acc.lo, acc.hi) == pytest.approx((15.0, 0.0, 78.531), abs=1e-3)
    clean = metric_interval([95.0, 99.0], "acc_clean")
    assert (clean.lo, clean.hi) == pytest.approx((71.588, 100.0), abs=1e-3)
    lip = metric_interval([1.0, 3.0], "lip_jacobian_median")
    assert (lip.lo, lip.hi) == pytest.approx((0.0, 14.706), abs=1e-3)
    other = metric_interval([10.0, 20.0], "loss")
    assert (other.lo, other.hi) == pytest.approx((-48.531, 78.531), abs=1e-3)
    assert metric_bounds("probe_acc_pgd_4") == metric_bounds("epoch_acc_clean") == (0.0, 100.0)
    assert metric_interval([10.0], "acc_pgd_4").n == 1  # one seed: no interval to clip
    assert math.isnan(metric_interval([10.0], "acc_pgd_4").lo)


# ---------------------------------------------------------------- the baseline and seed pairs
def _recs(rows: list[tuple[dict, int, dict]]) -> list[dict]:
    return [
        {"run_id": f"r{i}", "params": {**p, "seed": s}, "metrics": m}
        for i, (p, s, m) in enumerate(rows)
    ]


def test_baseline_is_the_unregularized_arm_with_the_most_runs():
    """Catches: ``baseline_arm`` taking the baseline arm with the fewest runs. The arm with
    fewer runs also sorts first by name, so neither order by name alone passes."""
    from lipsweep.decide.arms import baseline_arm

    rows = [({**BASE, "lr": "0.0001"}, 0, {"acc_clean": 1.0})]  # 'baseline (lr=0.0001)'
    rows += [(BASE, s, {"acc_clean": 2.0}) for s in (0, 1, 2)]  # 'baseline (lr=0.001)'
    rows += [(JAS, s, {"acc_clean": 3.0}) for s in (0, 1, 2, 3)]  # most runs, not a baseline
    arms = group_arms(_recs(rows))
    base = baseline_arm(arms)
    assert base.params["lr"] == "0.001" and base.seeds == [0, 1, 2]
    few = next(a for a in arms if len(a.runs) == 1)
    assert few.name < base.name  # so the name tie-break alone would pick `few`


def test_paired_table_counts_the_seeds_shared_with_the_baseline():
    """Catches: the 'pairs' column counting the arm's seeds (3) instead of the seeds it
    shares with the baseline (2)."""
    from lipsweep.decide.report import paired_markdown

    rows = [(BASE, s, {"acc_clean": 30.0 + s}) for s in (0, 1)]
    rows += [(JAS, s, {"acc_clean": 31.0 + 2 * s}) for s in (0, 1, 2)]
    base, jas = group_arms(_recs(rows))
    table = paired_markdown([base, jas], base)
    # seeds 0, 1: d = (1, 2), mean 1.5; seed 2 has no baseline and pairs with nothing
    row = next(line for line in table.splitlines() if line.startswith(f"| {jas.name} |"))
    assert row.split("|")[2].strip() == "2", table
    assert "+1.50" in row


# ---------------------------------------------------------------- one run per seed
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
