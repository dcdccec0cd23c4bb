"""`lipsweep bench-search`: hypervolume, the recorded table, the replay."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import bench_module

from lipsweep.core.config_base import ConfigError
from lipsweep.core.hypervolume import hypervolume, reference_point, relative_hypervolume
from lipsweep.search import replay

OBJECTIVES = [("acc_clean", "max"), ("acc_pgd_4", "max"), ("lip_jacobian_median", "min")]


def test_hypervolume_of_a_hand_computed_2d_front():
    """Maximise both: (3, 1), (1, 3), (2, 2) against the reference point (0, 0) dominate
    3x1 + 1x3 + 2x2 minus the overlaps 1x1 + 1x1 + 1x1... by hand: the staircase
    x in [0,1]: height 3; [1,2]: 2; [2,3]: 1 -> 3 + 2 + 1 = 6; a dominated point adds 0."""
    pts = np.array([[3.0, 1.0], [1.0, 3.0], [2.0, 2.0], [1.0, 1.0]])
    ref = np.array([0.0, 0.0])  # minimisation form of (0, 0) maximised
    assert hypervolume(pts, ["max", "max"], ref) == pytest.approx(6.0)
    # minimise x, maximise y, reference (4, 0): (1, 1), (2, 2), (3, 3) trade off; the
    # staircase x in [1,2]: height 1; [2,3]: 2; [3,4]: 3 -> 6
    mixed = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    assert hypervolume(mixed, ["min", "max"], np.array([4.0, 0.0])) == pytest.approx(6.0)


def test_the_reference_point_is_the_fronts_nadir_pushed_out():
    """Dominated junk does not move the reference point (the nadir rule)."""
    front = np.array([[3.0, 1.0], [1.0, 3.0]])
    junk = np.array([[-50.0, -50.0]])
    dirs = ["max", "max"]
    ref = reference_point(np.vstack([front, junk]), dirs)
    # minimisation form: front (-3,-1), (-1,-3): nadir (-1,-1), range 2 each -> (-0.8, -0.8)
    np.testing.assert_allclose(ref, [-0.8, -0.8])
    assert relative_hypervolume(front, np.vstack([front, junk]), dirs) == pytest.approx(1.0)
    # maximisation form: ref (0.8, 0.8); the front's staircase 0.2 x 2.2 + 2 x 0.2 = 0.84,
    # (3, 1) alone 2.2 x 0.2 = 0.44
    assert relative_hypervolume(front[:1], front, dirs) == pytest.approx(0.44 / 0.84)


def _write_rows(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def synthetic_table(path: Path, seeds: int = 3, epochs: int = 6, seed: int = 0) -> Path:
    """A grid with a trade-off: robust configurations lose clean accuracy; some are dominated
    junk; per-epoch values approach the final ones (probes track the final PGD and ‖J_f‖)."""
    rng = np.random.default_rng(seed)
    rows = []
    configs = [("none", "", "")] + [
        (reg, lam, agg)
        for reg in ("jasmin", "specformer")
        for lam in ("0.01", "0.1", "1")
        for agg in ("mean", "max")
    ]
    for i, (reg, lam, agg) in enumerate(configs):
        strength = 0.0 if reg == "none" else float(lam)
        junk = reg == "specformer" and agg == "max"
        clean = 80 - 15 * strength - (10 if junk else 0)
        robust = 20 + 25 * strength**0.5 - (8 if junk else 0)
        lip = 10 / (1 + 3 * strength) + (2 if junk else 0)
        for s in range(seeds):
            noise = rng.normal(0, 0.5, 3)
            for e in range(1, epochs + 1):
                f = 1 - np.exp(-e / 2)
                rows.append(
                    {
                        "param:regularizer": reg,
                        "param:lam": lam,
                        "param:aggregation": agg,
                        "seed": s,
                        "epoch": e,
                        "epoch_seconds": 10.0 + i % 3,
                        "acc_clean": clean * f + noise[0],
                        "loss": 2.0 / e,
                        "probe_acc_pgd_4": robust * f + noise[1],
                        "probe_lip_jacobian_median": lip / f + noise[2] * 0.1,
                        "acc_pgd_4": robust + noise[1] if e == epochs else "",
                        "lip_jacobian_median": lip + noise[2] * 0.1 if e == epochs else "",
                    }
                )
    return _write_rows(path, rows)


def test_the_table_reads_back_with_its_per_epoch_and_final_columns(tmp_path):
    table = replay.load_table(synthetic_table(tmp_path / "t.csv"))
    assert table.params == ("regularizer", "lam", "aggregation") and table.epochs == 6
    assert len(table.configs) == 13 and all(len(c.seeds) == 3 for c in table.configs)
    assert set(table.per_epoch) >= {"acc_clean", "probe_acc_pgd_4"}
    assert "acc_pgd_4" in table.final and "acc_pgd_4" not in table.per_epoch
    assert table.compute == pytest.approx(sum(r["epoch_seconds"] for r in replay.iter_rows(table)))
    bad = tmp_path / "bad.csv"
    bad.write_text("param:a,seed,epoch\nx,0,1\n")
    with pytest.raises(ConfigError, match="epoch_seconds") as err:
        replay.load_table(bad)
    assert err.value.field == "table"
    # the keyed format: a `config` key and no settings columns reads as the same table
    keyed = tmp_path / "keyed.csv"
    rows = [
        {"config": r["config"], **{k: v for k, v in r.items() if not k.startswith("param:")}}
        for r in replay.iter_rows(table)
    ]
    _write_rows(keyed, rows)
    again = replay.load_table(keyed)
    assert again.params == ("config",) and again.epochs == table.epochs
    assert [c.key for c in again.configs] == [c.key for c in table.configs]
    assert again.compute == pytest.approx(table.compute) and again.final == table.final


def test_replays_are_deterministic_and_the_whole_grid_reaches_the_whole_front(tmp_path):
    table = replay.load_table(synthetic_table(tmp_path / "t.csv"))
    args = dict(objectives=OBJECTIVES, budget=0.4, replays=2, workers=4)
    first, runs = replay.bench_search(table, **args)
    again, _ = replay.bench_search(table, **args, only=["optuna-moasha", "random"])
    for name in ("optuna-moasha", "random"):
        assert json.dumps(first["methods"][name]) == json.dumps(again["methods"][name])
    syne = set() if replay.syne_tune_missing() is not None else {replay.SYNE_MOASHA}
    assert set(first["methods"]) == set(replay.DEFAULT_METHODS) | syne
    assert first["stop_on"] == [
        "acc_clean:max", "probe_acc_pgd_4:max", "probe_lip_jacobian_median:min"
    ]  # fmt: skip
    for r in runs["grid"]:
        assert r.hv[-1] == pytest.approx(1.0) and r.compute[-1] == pytest.approx(1.0)
    assert all(r.stopped > 0 for r in runs["moasha"])  # it stops dominated configurations
    assert all(r.stopped == 0 for r in runs["grid"] + runs["optuna-tpe"])


def test_future_epochs_change_nothing_the_replay_decided(tmp_path):
    """Through the harness: garbage in the epochs after each stopped trial's
    last one leaves every decision (and so the whole trajectory) the same."""
    table = replay.load_table(synthetic_table(tmp_path / "t.csv"))
    bench = replay.make_bench(table, OBJECTIVES, workers=3, confidence=0.5)
    method = replay.parse_method("moasha")

    def moasha(seed):
        return bench.search(method, seed), bench.rule(method, seed)

    base = replay.simulate(table, *moasha(0), OBJECTIVES, workers=3)
    # which (config, seed) ran how many epochs: replay with a rule that records it
    search, rule = moasha(0)
    seen: dict[str, int] = {}
    inner = rule.decide
    by_trial: dict[str, str] = {}

    def record(trial, group, t, metrics):
        seen[trial] = max(seen.get(trial, 0), t)
        return inner(trial, group, t, metrics)

    inner_suggest = search.suggest

    def suggest(trial):
        flat = inner_suggest(trial)
        if flat is not None:
            key = next(c.key for c in table.configs if c.params == {
                p: flat[p] for p in table.params})  # fmt: skip
            by_trial[trial] = f"{key}#{flat['seed']}"
        return flat

    rule.decide, search.suggest = record, suggest
    replay.simulate(table, search, rule, OBJECTIVES, workers=3)
    seen = {by_trial[t]: e for t, e in seen.items()}
    assert any(t < table.epochs for t in seen.values())
    rng = np.random.default_rng(1)
    for c in table.configs:
        for s in c.seeds:
            reached = seen.get(f"{c.key}#{s}", 0)
            if reached < table.epochs:
                for name in table.per_epoch:
                    c.metrics[s][name][reached:] = rng.uniform(-1e3, 1e3, table.epochs - reached)
    again = replay.simulate(table, *moasha(0), OBJECTIVES, workers=3)
    # the same trials ran the same epochs in the same order (the hypervolumes differ only
    # because the grid's own front, the reference, moved with the garbage final values)
    assert (again.compute, again.stopped) == (base.compute, base.stopped)


def test_bench_search_command_writes_its_summary_and_refuses_bad_objectives(tmp_path, capsys):
    from lipsweep.__main__ import main

    table = synthetic_table(tmp_path / "t.csv", seeds=2, epochs=4)
    out = tmp_path / "out"
    objectives = [f"--objective={n}:{d}" for n, d in OBJECTIVES]
    argv = ["bench-search", "--table", str(table), *objectives, "--replays", "2", "--out", str(out)]
    assert main([*argv, "--method", "grid", "--method", "moasha"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == {"grid", "moasha"} and (out / "hypervolume.png").is_file()
    assert set(summary["references"]) == set(replay.REFERENCES)
    printed = capsys.readouterr().out
    assert "moasha" in printed and "informed-order" in printed
    for bad, flag in (
        (["--objective", "acc_aa_2:max"], "--objective"),
        (["--objective", "acc_clean:up"], "--objective"),
        (["--objective", "acc_clean:max", "--stop-on", "acc_pgd_4:max"], "--stop-on"),
        (["--objective", "acc_clean:max", "--budget", "1.5"], "--budget"),
        (["--objective", "acc_clean:max", "--method", "nope"], "--method"),
    ):
        rc = main(["bench-search", "--table", str(table), "--out", str(tmp_path / "o2"), *bad])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and flag in err, (bad, err)
        assert not (tmp_path / "o2").exists()


def _decisions(runs: dict[str, list[replay.Replay]]) -> dict[str, list[tuple]]:
    return {name: [(r.compute, r.stopped) for r in rs] for name, rs in runs.items()}


def test_grace_period_and_reduction_factor_set_every_schedulers_rungs(tmp_path, capsys):
    """The flags reach asha-clean, moasha and optuna-moasha (their compute changes), the
    defaults are today's rungs (1, 2: the same decisions as not passing them), and a bad value
    exits 2 with one line naming the flag before anything is written."""
    from lipsweep.__main__ import main

    path = synthetic_table(tmp_path / "t.csv", epochs=8)
    table = replay.load_table(path)
    schedulers = ["asha-clean", "moasha", "optuna-moasha"]
    args = dict(
        objectives=OBJECTIVES, budget=0.4, replays=2, workers=4, only=schedulers, confidence=0.5
    )
    _, base = replay.bench_search(table, **args)
    _, same = replay.bench_search(table, **args, grace_period=1, reduction_factor=2)
    assert _decisions(same) == _decisions(base)
    for change in ({"grace_period": 3}, {"reduction_factor": 3}):
        _, other = replay.bench_search(table, **args, **change)
        # moasha stops only at rung 1 on this table: rf 3 (rungs 1, 3) decides as rf 2 there
        for name in schedulers if "grace_period" in change else ["asha-clean"]:
            assert _decisions(other)[name] != _decisions(base)[name], (change, name)
    bench = replay.make_bench(table, OBJECTIVES, reduction_factor=3)
    assert bench.rule(replay.parse_method("moasha"), 0).core.rungs == (1.0, 3.0)
    objectives = [f"--objective={n}:{d}" for n, d in OBJECTIVES]
    argv = ["bench-search", "--table", str(path), *objectives, "--replays", "2"]
    out = tmp_path / "out"
    flags = ["--grace-period", "3", "--reduction-factor", "3", "--method", "moasha"]
    assert main([*argv, "--out", str(out), *flags]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["grace_period"], summary["reduction_factor"]) == (3, 3)
    capsys.readouterr()
    for bad, flag in (
        (["--reduction-factor", "1"], "--reduction-factor"),
        (["--grace-period", "0"], "--grace-period"),
        (["--grace-period", "9"], "--grace-period"),  # past the table's 8 epochs
    ):
        rc = main([*argv, "--out", str(tmp_path / "o2"), *bad])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and f"error: {flag}:" in err, (bad, err)
        assert not (tmp_path / "o2").exists()


def test_syne_moasha_is_asked_for_without_syne_tune_exits_2(tmp_path, capsys, monkeypatch, caplog):
    """Without Syne Tune, ``syne-moasha`` is absent from the methods with one log line saying
    why, and asking for it is a one-line error naming --method and the extra to install."""
    from lipsweep.__main__ import main

    monkeypatch.setattr(replay, "syne_tune_missing", lambda: "No module named 'syne_tune'")
    synthetic_table(tmp_path / "t.csv", seeds=1, epochs=4)
    argv = ["bench-search", "--table", str(tmp_path / "t.csv"), "--objective", "acc_clean:max"]
    rc = main([*argv, "--out", str(tmp_path / "o"), "--method", replay.SYNE_MOASHA])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "error: --method:" in err, err
    assert "syne_tune" in err and "--extra bench" in err and not (tmp_path / "o").exists()


def test_syne_moasha_stops_dominated_trials_with_syne_tunes_own_decisions(tmp_path):
    """Syne Tune's MO-ASHA deciding in the replay: ``max`` metrics are negated for it (a
    trial dominated by the three recorded at a rung stops; with the sign lost it would be
    the best and continue), it stops configurations on the synthetic table, spending less
    than the grid, and the same seed gives the same replay."""
    pytest.importorskip(
        "syne_tune", reason="syne-moasha needs the benchmark-only bench extra (syne-tune)"
    )
    rule = replay.SyneMoashaRule(["acc", "lip"], ["max", "min"], 8, 1, 2, seed=0)
    front = [(90.0, 5.0), (80.0, 3.0), (70.0, 1.0)]  # a trade-off: none dominates another
    for i, (acc, lip) in enumerate(front):
        assert rule.on_result(f"t{i}", f"t{i}", 0, {})
        assert rule.on_result(f"t{i}", f"t{i}", 1, {"acc": acc, "lip": lip})
    assert rule.on_result("bad", "bad", 0, {})
    assert not rule.on_result("bad", "bad", 1, {"acc": 60.0, "lip": 6.0})  # dominated by all
    # Syne Tune 0.16.0 ranks a new trial by the index of the trial its sort puts last, not
    # by its own place (docs/benchmarks.md): a trial dominating every recorded one also stops
    assert rule.on_result("best", "best", 0, {})
    assert not rule.on_result("best", "best", 1, {"acc": 95.0, "lip": 0.5})

    table = replay.load_table(synthetic_table(tmp_path / "t.csv"))
    syne = replay.methods(table, OBJECTIVES, ())[replay.SYNE_MOASHA]
    runs = [replay.simulate(table, *syne(s), OBJECTIVES, workers=4) for s in range(3)]
    assert all(r.stopped > 0 for r in runs)  # it stops configurations
    assert all(r.compute[-1] < 1.0 for r in runs)  # so it never spends the grid's compute
    again = replay.simulate(table, *syne(1), OBJECTIVES, workers=4)
    assert (again.compute, again.hv, again.stopped) == (
        runs[1].compute,
        runs[1].hv,
        runs[1].stopped,
    )


def test_grid_signal_figures_match_a_hand_computation(tmp_path):
    """benchmarks/grid_signal.py: separation = std of the seed means / mean(seed std /
    sqrt(seeds)), and Spearman's rho per epoch, on a 3-configuration table worked by hand."""
    signal = bench_module("grid_signal")
    finals = {"a": (1.0, 3.0), "b": (4.0, 6.0), "c": (7.0, 10.0)}  # means 2, 5, 8.5
    probes = {1: {"a": 3.0, "b": 2.0, "c": 1.0}, 2: {"a": 1.0, "b": 3.0, "c": 2.0}}
    rows = [
        {
            "config": key,
            "seed": s,
            "epoch": e,
            "epoch_seconds": 1.0,
            "probe_f": probes.get(e, {}).get(key, 0.0) + s,
            "f": finals[key][s] if e == 3 else "",
        }
        for key in finals
        for s in (0, 1)
        for e in (1, 2, 3)
    ]
    table = replay.load_table(_write_rows(tmp_path / "t.csv", rows))
    # seed std (ddof 1): sqrt(2), sqrt(2), sqrt(4.5); over sqrt(2): 1, 1, 1.5 -> noise 7/6;
    # the means' std, around 31/6: sqrt(((-19/6)^2 + (-1/6)^2 + (20/6)^2) / 2) = sqrt(127/12)
    assert signal.separation(table, "f") == pytest.approx(np.sqrt(127 / 12) / (7 / 6))
    # epoch 1 ranks the configurations c, b, a (reversed): -1; epoch 2 ranks a < c < b: +0.5
    assert signal.early_rho(table, "f", "probe_f") == pytest.approx([-1.0, 0.5])


def test_the_informed_order_takes_hypervolume_per_second_first(tmp_path):
    """Maximise a and b. B = (1, 3) costs 10 s, A = (3, 1) 20 s, C = (1, 1) 10 s (dominated).
    Reference (0.8, 0.8) (the front's nadir pushed out 10% of its range 2): A and B alone each
    dominate 2.2 x 0.2 = 0.44, both 0.84 (test above). Per second B gains 0.044, A 0.022, C
    0.004: the order is B, A, then C (which adds nothing); on one worker the compute after each
    is 10/40, 30/40, 40/40 and the hypervolume 0.44/0.84, 1, 1."""
    finals = {"C": (1.0, 1.0, 5.0), "A": (3.0, 1.0, 10.0), "B": (1.0, 3.0, 5.0)}
    rows = [
        {"config": key, "seed": 0, "epoch": e, "epoch_seconds": sec, "loss": 1.0,
         "a": a if e == 2 else "", "b": b if e == 2 else ""}
        for key, (a, b, sec) in finals.items()
        for e in (1, 2)
    ]  # fmt: skip
    table = replay.load_table(_write_rows(tmp_path / "t.csv", rows))
    objectives = [("a", "max"), ("b", "max")]
    assert [c.key for c in replay.informed_order(table, objectives)] == ["B", "A", "C"]
    bench = replay.make_bench(table, objectives, [("loss", "min")], workers=1)
    run = replay.references(bench, replays=1, workers=1)["informed-order"][0]
    assert run.compute == pytest.approx([0.25, 0.75, 1.0])
    assert run.hv == pytest.approx([0.44 / 0.84, 1.0, 1.0])


def test_moasha_told_the_finals_keeps_the_front_that_misleading_probes_lose(tmp_path):
    """Two front configurations whose probes look worst, two dominated ones whose probes look
    best: moasha on the probes stops a front configuration in some grid order (a dominated one
    reached the rung first), moasha told the final values never does."""
    finals = {"front1": (3.0, 1.0), "front2": (1.0, 3.0), "junk1": (0.5, 0.5), "junk2": (0.4, 0.4)}
    rows = [
        {"config": key, "seed": s, "epoch": e, "epoch_seconds": 1.0,
         "probe_a": (10.0 if key.startswith("junk") else 0.0) + s,
         "probe_b": (10.0 if key.startswith("junk") else 0.0) + s,
         "a": a + 0.01 * s if e == 4 else "", "b": b + 0.01 * s if e == 4 else ""}
        for key, (a, b) in finals.items()
        for s in (0, 1)
        for e in (1, 2, 3, 4)
    ]  # fmt: skip
    table = replay.load_table(_write_rows(tmp_path / "t.csv", rows))
    objectives = [("a", "max"), ("b", "max")]
    bench = replay.make_bench(table, objectives, workers=2)
    probes = [bench.replay(replay.parse_method("moasha"), seed) for seed in range(6)]
    told = replay.references(bench, replays=6, workers=2)["moasha-told-finals"]
    assert any(r.hv[-1] < 1.0 for r in probes)
    assert all(r.hv[-1] == pytest.approx(1.0) for r in told)
    assert any(r.stopped >= 1 for r in told)  # it does stop: junk, on its final values


def test_grid_signal_front_shares_match_a_hand_computation(tmp_path):
    """Maximise a and b: A = (3, 1), B = (1, 3), C = (1, 1) dominated. Reference (0.8, 0.8):
    A or B alone dominates 0.44 of the front's 0.84 (the informed-order test's figures), the
    grid without A is B alone, and C is not listed."""
    rows = [
        {"config": key, "seed": 0, "epoch": e, "epoch_seconds": 1.0, "loss": 1.0,
         "a": a if e == 2 else "", "b": b if e == 2 else ""}
        for key, (a, b) in {"C": (1.0, 1.0), "A": (3.0, 1.0), "B": (1.0, 3.0)}.items()
        for e in (1, 2)
    ]  # fmt: skip
    table = replay.load_table(_write_rows(tmp_path / "t.csv", rows))
    shares = bench_module("grid_signal").front_shares(table, [("a", "max"), ("b", "max")])
    assert [k for k, *_ in shares] == ["A", "B"]
    assert [(alone, without) for *_, alone, without in shares] == pytest.approx(
        [(0.44 / 0.84, 0.44 / 0.84)] * 2
    )


def test_stretch_table_splits_each_epoch_and_keeps_the_final_evaluation_last(tmp_path):
    """benchmarks/stretch_table.py, factor 3 on one trial of 2 epochs: 6 s of training, then
    an epoch of 6 s training + 12 s final evaluation (its training estimated by the mean
    training epoch). Per-epoch values repeat, acc_clean's last value (the final evaluation's)
    only on the last epoch, final-only values only there; the compute is the same."""
    rows = [
        {"config": "x", "seed": 0, "epoch": 1, "epoch_seconds": 6.0, "acc_clean": 10.0,
         "probe_p": 1.0, "f": ""},
        {"config": "x", "seed": 0, "epoch": 2, "epoch_seconds": 18.0, "acc_clean": 30.0,
         "probe_p": 2.0, "f": 7.0},
    ]  # fmt: skip
    table = replay.load_table(_write_rows(tmp_path / "t.csv", rows))
    stretch = bench_module("stretch_table")
    stretch.write_table(stretch.table_rows(stretch.stretch(table, 3)), tmp_path / "long.csv")
    long = replay.load_table(tmp_path / "long.csv")
    (c,) = long.configs
    assert long.epochs == 6 and long.compute == pytest.approx(table.compute)
    assert (long.per_epoch, long.final) == (table.per_epoch, table.final)
    assert c.seconds["0"] == pytest.approx([2, 2, 2, 2, 2, 14])
    assert c.metrics["0"]["probe_p"] == pytest.approx([1, 1, 1, 2, 2, 2])
    assert c.metrics["0"]["acc_clean"] == pytest.approx([10, 10, 10, 10, 10, 30])
    assert np.isnan(c.metrics["0"]["f"][:-1]).all() and c.metrics["0"]["f"][-1] == 7.0


def test_the_oracle_floor_matches_a_hand_computation(tmp_path):
    """Maximise a and b, 2 seeds, epochs of 1 s and 2 s: A and B on the front cost 2 x 2 x 3 =
    12 s in full; the oracle stops C at epoch 1 for 2 s (both seeds) or 1 s (its lead seed):
    2/14 and 1/13 of its compute, 14/18 and 13/18 of the grid's 18 s."""
    rows = [
        {"config": key, "seed": s, "epoch": e, "epoch_seconds": float(e), "loss": 1.0,
         "a": a + 0.01 * s if e == 2 else "", "b": b if e == 2 else ""}
        for key, (a, b) in {"C": (1.0, 1.0), "A": (3.0, 1.0), "B": (1.0, 3.0)}.items()
        for s in (0, 1)
        for e in (1, 2)
    ]  # fmt: skip
    table = replay.load_table(_write_rows(tmp_path / "t.csv", rows))
    floor = replay.oracle_stopping(table, [("a", "max"), ("b", "max")])
    assert floor["seeds together"] == pytest.approx((2 / 14, 14 / 18))
    assert floor["lead seed first"] == pytest.approx((1 / 13, 13 / 18))


def test_search_figures_spread_matches_a_hand_computation():
    """benchmarks/search_figures.py --spread: replays 0.5, 1.0, 0.9, 0.8 in blocks of 2:
    median 0.85, quartiles 0.725 and 0.925 (linear), 1 of 4 >= 0.95, 3 of 4 >= 0.8, and the
    blocks' medians 0.75 and 0.85."""
    sp = bench_module("search_figures").spread([0.5, 1.0, 0.9, 0.8], block=2)
    assert sp["median"] == pytest.approx(0.85)
    assert sp["quartiles"] == pytest.approx((0.725, 0.925))
    assert (sp["share_at_least_0.95"], sp["share_at_least_0.8"]) == (0.25, 0.75)
    assert sp["blocks"] == pytest.approx([0.75, 0.85])


class _StopOneTrial(replay.NoStop):
    def __init__(self, trial: str) -> None:
        self.trial = trial

    def decide(self, trial, group, t, metrics) -> str:
        return "stop" if trial == self.trial and t >= 1 else "continue"


def test_a_configuration_completes_only_when_every_seed_ran_its_budget(tmp_path):
    """Configurations a and b, seeds 0 and 1, two epochs of 1 s each: the grid is 8 s. On
    one worker the trials run a/0, a/1, b/0, b/1 (t00000..t00003); b/1 is stopped after its
    first epoch. By hand: a completes at 4 s (0.5 of the grid); b, one seed short, counts as
    stopped, with its 2 + 1 = 3 s (0.375) spent on it; 7 s (0.875) in all."""
    from lipsweep.search.protocol import ListMember, Repeats

    rows = ["config,seed,epoch,epoch_seconds,acc_clean,acc_pgd_4"]
    for key, acc in (("a", 0.5), ("b", 0.6)):
        rows += [f"{key},{s},{e},1,{acc},{acc if e == 2 else ''}" for s in (0, 1) for e in (1, 2)]
    p = tmp_path / "t.csv"
    p.write_text("\n".join(rows) + "\n")
    table = replay.load_table(p)
    objectives = [("acc_clean", "max"), ("acc_pgd_4", "max")]
    order = ListMember([{"config": "a"}, {"config": "b"}])
    search = Repeats(replay.TableMember(order, table), ["0", "1"], ["acc_clean", "acc_pgd_4"])
    r = replay.simulate(table, search, _StopOneTrial("t00003"), objectives, 1)
    assert r.compute == [pytest.approx(0.5)] and r.stopped == 1
    assert r.spent == pytest.approx(0.875) and r.spent_on_stopped == pytest.approx(0.375)


def test_the_budget_reached_by_summed_compute_counts_as_within_it():
    """Compute is summed in floats: 0.1 + 0.2 is 0.30000000000000004, which is the budget
    0.3 itself, so its hypervolume 0.6 is reached within 0.3."""
    r = replay.Replay(compute=[0.1, 0.1 + 0.2], hv=[0.2, 0.6])
    assert r.hv_at(0.3) == 0.6 and r.hv_at(0.1) == 0.2 and r.hv_at(0.05) == 0.0


# ---------------------------------------------------------------- bench-search's tables
BENCH_OBJECTIVES = ["--objective", "acc_clean:max", "--objective", "acc_pgd_4:max"]
HEADER = "config,seed,epoch,epoch_seconds,acc_clean,acc_pgd_4,probe_acc_pgd_4\n"
GOOD = [
    "a,0,1,1.0,0.5,,0.2", "a,0,2,1.0,0.6,0.3,0.3",
    "b,0,1,1.0,0.4,,0.1", "b,0,2,1.0,0.5,0.2,0.2",
]  # fmt: skip


def _table(tmp_path: Path, rows: list[str], raw: bytes = b"") -> Path:
    p = tmp_path / "t.csv"
    p.write_bytes(raw or (HEADER + "\n".join(rows) + "\n").encode())
    return p


def _bench(capsys, table: Path, out: Path, *extra: str) -> tuple[int, str]:
    from lipsweep.__main__ import main

    argv = ["bench-search", "--table", str(table), *BENCH_OBJECTIVES, "--replays", "1"]
    rc = main([*argv, "--method", "grid", "--out", str(out), *extra])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    "rows,raw,words",
    [
        (GOOD[:1] + ["a,0,2,inf,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD[:1] + ["a,0,2,,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD[:1] + ["a,0,2,-3,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD[:1] + ["a,0,2,nan,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD + ["a,0,2,1.0,0.9,0.9,0.9"], b"", "a second row for a seed 0 epoch 2"),
        (GOOD[:1] + ["a,0,2,1.0,high,0.3,0.3"] + GOOD[2:], b"", "acc_clean is not a number"),
        (GOOD[:1] + ["a,0,2,1.0"] + GOOD[2:], b"", "4 fields, the header has 7"),
        ([], (HEADER + "a,0,1,1.0,0.5,,\xe9\n").encode("latin-1"), "not UTF-8"),
        ([], (HEADER + "a,0,1,1.0,0.5\x00,,0.1\n").encode(), "NUL byte"),
    ],
)  # fmt: skip
def test_a_hostile_table_is_refused_with_one_line_naming_its_line(
    tmp_path, capsys, rows, raw, words
):
    out = tmp_path / "out"
    rc, err = _bench(capsys, _table(tmp_path, rows, raw), out)
    assert rc == 2 and err.count("\n") == 1 and "--table" in err and words in err, err
    assert "t.csv:2:" in err or "t.csv:3:" in err or "t.csv:6:" in err, err
    assert not out.exists()


def test_a_huge_reduction_factor_is_one_line_in_the_cli_and_the_api(tmp_path, capsys):
    from lipsweep import api

    table = _table(tmp_path, GOOD)
    rc, err = _bench(capsys, table, tmp_path / "o", "--reduction-factor", "9" * 401)
    assert rc == 2 and err.count("\n") == 1 and "--reduction-factor" in err, err
    with pytest.raises(ConfigError) as exc:
        api.bench_search(
            table=str(table), objective=("acc_clean:max",), reduction_factor=10**400,
            out=str(tmp_path / "o"),
        )  # fmt: skip
    assert exc.value.field == "reduction_factor"


@pytest.mark.parametrize(
    "flag,extra",
    [
        ("--objective", ["--objective", "acc_clean:min"]),
        ("--stop-on", ["--stop-on", "acc_clean:max", "--stop-on", "acc_clean:max"]),
    ],
)
def test_a_metric_given_twice_names_the_flag_the_user_typed(tmp_path, capsys, flag, extra):
    from lipsweep import api

    rc, err = _bench(capsys, _table(tmp_path, GOOD), tmp_path / "o", *extra)
    assert rc == 2 and err.count("\n") == 1 and "scheduler" not in err, err
    assert f"{flag}: metric 'acc_clean' is given more than once" in err, err
    field = flag.removeprefix("--").replace("-", "_")
    twice = {"objective": ("acc_clean:max",), field: ("acc_clean:max",) * 2}
    with pytest.raises(ConfigError) as exc:
        api.bench_search(table=str(_table(tmp_path, GOOD)), out=str(tmp_path / "o"), **twice)
    assert exc.value.field == field and not (tmp_path / "o").exists()


@pytest.mark.parametrize("value,ok", [(1.5, False), (2, True), (2.5, True)])
@pytest.mark.parametrize("entry", ["asha", "moasha", "bench-search"])
def test_every_entry_point_takes_the_same_reduction_factors(tmp_path, capsys, entry, value, ok):
    """One rule (``search/schedulers/rules.py``): a real number >= 2."""
    from lipsweep.search.schedulers import scheduler_settings

    if entry == "bench-search":
        table, flag = _table(tmp_path, GOOD), ["--reduction-factor", str(value)]
        rc, err = _bench(capsys, table, tmp_path / "o", *flag)
        assert rc == (0 if ok else 2), err
        assert ok or "--reduction-factor: must be a number >= 2, got 1.5" in err, err
        return
    raw = {"type": entry, "reduction_factor": value}
    raw.update({"metrics": ["loss"], "modes": ["min"]} if entry == "moasha" else {})
    if ok:
        assert scheduler_settings(raw).reduction_factor == value
        return
    with pytest.raises(ConfigError) as exc:
        scheduler_settings(raw)
    assert exc.value.field == "scheduler.reduction_factor"
    assert "must be a number >= 2, got 1.5" in exc.value.message


@pytest.mark.parametrize("value", ["1.5", "0", "-0.2", "nan"])
def test_a_confidence_outside_0_1_is_one_line(tmp_path, capsys, value):
    rc, err = _bench(capsys, _table(tmp_path, GOOD), tmp_path / "o", "--confidence", value)
    assert rc == 2 and err.count("\n") == 1 and "--confidence" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "flag,value",
    [("confidence", 1.5), ("reduction_factor", 1.5), ("grace_period", 0), ("grace_period", "2")],
)
def test_the_api_checks_the_rule_flags_by_moashas_own_rules(tmp_path, flag, value):
    """``bench_search`` called directly checks its scheduler flags as ``MoashaSettings`` does,
    the error naming the flag, before any replay."""
    table = replay.load_table(_table(tmp_path, GOOD))
    with pytest.raises(ConfigError) as exc:
        replay.bench_search(table, OBJECTIVES[:2], 0.4, 1, 1, only=["grid"], **{flag: value})
    assert exc.value.field == flag


def test_summary_json_is_strict_json_written_through_a_temporary(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    table = _table(tmp_path, GOOD)
    assert _bench(capsys, table, out)[0] == 0
    good = (out / "summary.json").read_text()
    json.loads(good, parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"))
    from lipsweep.core import paths

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths.os, "fsync", full_disk)
    rc, err = _bench(capsys, table, out, "--replays", "2")
    assert rc == 1 and "summary.json" in err and err.count("\n") == 1, err
    assert (out / "summary.json").read_text() == good  # the previous file is whole
    assert sorted(p.name for p in out.iterdir()) == ["hypervolume.png", "summary.json"]
    with pytest.raises(ValueError):  # NaN is not JSON: refused, never written
        replay.write({"budget": 0.4, "x": float("nan")}, {}, out)
    assert (out / "summary.json").read_text() == good


# ---------------------------------------------------------------- the replay's scoring
class _StopAtFirstEpoch(replay.NoStop):
    def __init__(self, key: str) -> None:
        self.key = key

    def decide(self, trial, group, t, metrics) -> str:
        return "stop" if self.key in group and t >= 1 else "continue"

    def group(self, trial, flat):
        return flat["config"]


def test_a_stopped_trial_is_charged_the_epochs_it_ran_not_its_budget(tmp_path):
    """b (epochs of 10, 20, 30 s) is stopped after its first epoch, then a (1, 2, 3 s) runs in
    full on the one worker: a completes at 10 + 6 of the grid's 66 worker-seconds."""
    p = tmp_path / "t.csv"
    rows = ["config,seed,epoch,epoch_seconds,acc_clean,acc_pgd_4"]
    for key, secs, acc in (("a", (1, 2, 3), 0.5), ("b", (10, 20, 30), 0.4)):
        rows += [f"{key},0,{e},{s},{acc},{acc if e == 3 else ''}" for e, s in enumerate(secs, 1)]
    p.write_text("\n".join(rows) + "\n")
    table = replay.load_table(p)
    from lipsweep.search.protocol import ListMember, Repeats

    objectives = [("acc_clean", "max"), ("acc_pgd_4", "max")]
    order = ListMember([{"config": "b"}, {"config": "a"}])
    search = Repeats(replay.TableMember(order, table), ["0"], ["acc_clean", "acc_pgd_4"])
    r = replay.simulate(table, search, _StopAtFirstEpoch("b"), objectives, 1)
    assert r.compute == [pytest.approx(16 / 66)] and r.stopped == 1
    assert r.spent == pytest.approx(16 / 66) and r.stopped_share == pytest.approx(10 / 16)


def test_the_median_counts_never_as_worst_and_takes_the_middle_pair_mean():
    median = replay._median
    assert median([None, 0.2, 0.3]) == 0.3  # never reached sorts above every number
    assert median([None, None, 0.5]) is None
    assert median([0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.25)  # not the upper 0.3
    assert median([0.4, 0.1, 0.3]) == 0.3


def test_the_budget_is_inclusive():
    r = replay.Replay(compute=[0.2, 0.4, 0.6], hv=[0.3, 0.7, 0.9])
    assert r.hv_at(0.4) == 0.7 and r.hv_at(0.39) == 0.3 and r.hv_at(0.1) == 0.0
    assert r.compute_to(0.7) == 0.4


RAY_FREE_METHODS = (
    "grid", "random", "moasha", "asha-clean", "random+asha", "optuna-tpe", "optuna-nsga2",
    "optuna-tpe+moasha",
)  # fmt: skip


def test_bench_search_of_the_built_in_methods_imports_no_ray(tmp_path):
    """The schedulers' factories build their Ray-free cores, the grid and random searchers'
    plans need no Ray, and the Optuna searchers name Ray-free members (ask and tell on the
    study), so a replay of them never imports Ray."""
    root = Path(__file__).resolve().parents[1]
    argv = [
        "bench-search", "--table", str(root / "benchmarks" / "data" / "tiny_grid.csv"),
        "--objective", "acc_clean:max", "--replays", "1", "--out", str(tmp_path / "o"),
        *[arg for m in RAY_FREE_METHODS for arg in ("--method", m)],
    ]  # fmt: skip
    code = (
        "import sys\nfrom lipsweep.cli import main\n"
        f"rc = main({argv!r})\n"
        "ray = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
        "print(rc, len(ray), ray[:5])"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "0 0 []", proc.stdout[-2000:]
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["methods"].keys() == set(
        RAY_FREE_METHODS
    )
