"""The search protocol (lipsweep/search/protocol.py): every configuration once per seed, judged
as one, under the live Optuna searcher and the replay alike; ``bench-search`` replaying any
registered member, plugins included; replay equal to live where a seed is stopped in its last
epoch; the same summary in a fresh process, and a committed summary row regenerated to the
digit. No Ray is started here."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _sweep_helpers import space_file

from lipsweep.core.config_base import ConfigError
from lipsweep.search import replay
from lipsweep.search.protocol import STOP, ListMember, Repeats
from lipsweep.search.schedulers.moasha import MoAsha

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "benchmarks" / "data" / "tiny_grid.csv"
OBJ3 = [("acc_clean", "max"), ("acc_pgd_4", "max"), ("lip_jacobian_median", "min")]


class _Member:
    def __init__(self, configs):
        self.left, self.told = list(configs), []

    def suggest(self, trial_id):
        return self.left.pop(0) if self.left else None

    def report(self, trial_id, result, failed=False):
        self.told.append((trial_id, result, failed))


def test_repeats_runs_every_seed_and_tells_the_seed_mean_once():
    member = _Member([{"lr": 1}, {"lr": 2}])
    rep = Repeats(member, [0, 1, 2], ["a"])
    got = [rep.suggest(f"t{i}") for i in range(7)]
    assert got[:3] == [{"lr": 1, "seed": s} for s in (0, 1, 2)]
    assert got[3:6] == [{"lr": 2, "seed": s} for s in (0, 1, 2)] and got[6] is None
    assert rep.exhausted and rep.lead("t2") == "t0" and rep.lead("t4") == "t3"
    rep.report("t0", {"a": 1.0})
    rep.report("t1", {"a": 2.0})
    assert member.told == []  # waits for every seed
    rep.report("t2", {"a": 6.0, "other": 1})
    assert member.told == [("t0", {"a": 3.0}, False)]
    rep.report("t3", None)  # stopped
    rep.report("t4", None, failed=True)
    rep.report("t5", None)
    assert member.told[-1] == ("t3", None, False)  # pruned, not failed


OPTUNA_THREE_SEEDS = {
    "fixed": {"epochs": 2},
    "repeat": {"seed": [0, 1, 2]},
    "search": {
        "algorithm": "optuna-tpe",
        "num_samples": 2,
        "metric": "acc_clean",
        "mode": "max",
        "space": {"lr": {"loguniform": [1.0e-4, 1.0e-2]}},
    },
}
"""Two Optuna draws, each on three seeds."""


def test_optuna_with_repeat_runs_every_draw_on_every_seed(tmp_path):
    from lipsweep.search.searchers import SearchRequest, create_searcher
    from lipsweep.search.space import load_space
    from lipsweep.sweep.searchers._optuna import RepeatSearcher

    spec = load_space(space_file(tmp_path, OPTUNA_THREE_SEEDS))
    assert spec.num_trials == 6 and [r["seed"] for r in spec.repeats] == [0, 1, 2]
    request = SearchRequest(
        fixed=spec.fixed, space=spec.search.space, repeats=spec.repeats, study_name="s"
    )
    plan = create_searcher("optuna-tpe", spec.search.settings, request)
    assert isinstance(plan.search_alg, RepeatSearcher) and plan.num_samples == 6
    got = [plan.search_alg.suggest(f"t{i}")["trial"] for i in range(6)]
    assert [g["seed"] for g in got] == [0, 1, 2, 0, 1, 2]
    assert got[0]["lr"] == got[1]["lr"] == got[2]["lr"] != got[3]["lr"]
    for i, acc in enumerate((0.1, 0.2, 0.6)):
        plan.search_alg.on_trial_complete(f"t{i}", {"acc_clean": acc, "lipsweep_final": 1})
    study = plan.search_alg.inner._ot_study
    (done,) = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert done.value == pytest.approx(0.3)  # the seed mean, told once


def test_a_repeat_searcher_saved_between_seeds_resumes_to_the_same_seed_mean(tmp_path):
    """Tune's checkpoint of the searcher (JSON, no pickle of ours) holds which seeds of a draw
    are still out: a restored searcher tells the study the same seed mean."""
    from lipsweep.search.searchers import SearchRequest, create_searcher
    from lipsweep.search.space import load_space

    spec = load_space(space_file(tmp_path, OPTUNA_THREE_SEEDS))

    def plan(name):
        request = SearchRequest(
            fixed=spec.fixed, space=spec.search.space, repeats=spec.repeats, study_name=name
        )
        return create_searcher("optuna-tpe", spec.search.settings, request).search_alg

    first = plan("a")
    got = [first.suggest(f"t{i}")["trial"] for i in range(4)]
    first.on_trial_complete("t0", {"acc_clean": 0.1, "lipsweep_final": 1})
    checkpoint = tmp_path / "searcher.json"
    first.save(str(checkpoint))
    assert json.loads(checkpoint.read_text())["repeats"]["waiting"] == {"t0": 2, "t3": 3}

    second = plan("b")
    second.restore(str(checkpoint))
    assert second.suggest("t4")["trial"] == {**got[3], "seed": 1}
    for i, acc in ((1, 0.2), (2, 0.6)):
        second.on_trial_complete(f"t{i}", {"acc_clean": acc, "lipsweep_final": 1})
    (done,) = [t for t in second.inner._ot_study.trials if t.state.name == "COMPLETE"]
    assert done.value == pytest.approx(0.3)
    assert done.params["lr"] == pytest.approx(got[0]["lr"])


def test_repeat_beyond_seed_is_refused_under_a_learning_searcher(tmp_path):
    from lipsweep.search.space import load_space

    space = tmp_path / "s.yaml"
    space.write_text(
        "fixed: {epochs: 2}\nrepeat: {seed: [0, 1], lr: [0.1, 0.2]}\n"
        "search: {algorithm: optuna, num_samples: 2, metric: acc_clean, mode: max, "
        "space: {weight_decay: {uniform: [0.0, 0.1]}}}\n"
    )
    with pytest.raises(ConfigError, match="may only list seed") as exc:
        load_space(space)
    assert exc.value.field == "repeat"


# ---------------------------------------------------------------- the replay
def test_bench_search_replays_plugin_searchers_and_schedulers(tmp_path):
    """A searcher and a scheduler registered by a plugin are replayed by name, through the
    same factories a live sweep calls."""
    from lipsweep.search.schedulers import register_scheduler, unregister_scheduler
    from lipsweep.search.schedulers.moasha import group_key
    from lipsweep.search.schedulers.moasha_settings import MoashaSettings
    from lipsweep.search.searchers import (
        GridSettings,
        SearcherInfo,
        TunePlan,
        register_searcher,
        unregister_searcher,
    )
    from lipsweep.sweep.schedulers._tune import CoreScheduler

    @register_searcher("first-half", settings=GridSettings, info=SearcherInfo(sampled=False))
    def first_half(settings, request):
        trials = list(request.trials)
        return TunePlan(param_space={"trial": {"grid_search": trials[: len(trials) // 2]}})

    class Strict(MoashaSettings):
        type = "strict"

    @register_scheduler("strict", settings=Strict)
    def strict(settings, ctx):
        core = MoAsha(settings.metrics, settings.modes, 1, 2, ctx.epochs, confidence=None)
        return CoreScheduler(core, group_key)

    try:
        table = replay.load_table(TINY)
        summary, runs = replay.bench_search(
            table, OBJ3, 0.4, 2, 4, only=["first-half", "first-half+strict", "random+strict"]
        )
        assert set(summary["methods"]) == {"first-half", "first-half+strict", "random+strict"}
        assert all(len(r.hv) <= 10 for r in runs["first-half"])  # half the grid ran
        assert all(r.stopped > 0 for r in runs["first-half+strict"])
        with pytest.raises(ConfigError, match="unknown scheduler 'nope'") as exc:
            replay.parse_method("grid+nope")
        assert exc.value.field == "method"
    finally:
        unregister_searcher("first-half")
        unregister_scheduler("strict")


def test_a_seed_stopped_in_its_last_epoch_is_stopped_as_live():
    """Live, a stopped configuration's seed reporting its last epoch gets STOP (Tune kills it
    before its final report); the replay counts it stopped, not completed."""
    core = MoAsha(["m"], ["max"], 1, 2, 4, {"A": 1, "B": 1}, confidence=None)
    core.decide("a", "A", 1, {"m": 5.0})
    assert core.decide("b", "B", 1, {"m": 1.0}) == STOP
    assert core.decide("b", "B", 4, {"m": 9.0}) == STOP  # its last epoch: still stopped

    class LastEpoch(replay.NoStop):
        def decide(self, trial, group, t, metrics):
            return STOP if t == 4 and group.startswith("t00000") else "continue"

    table = replay.load_table(TINY)
    order = ListMember([dict(c.params) for c in table.configs[:2]])
    search = Repeats(replay.TableMember(order, table), ["0"], ["acc_clean"])
    one_seed = dataclasses.replace(
        table, configs=tuple(dataclasses.replace(c, seeds=("0",)) for c in table.configs)
    )
    r = replay.simulate(one_seed, search, LastEpoch(), [("acc_clean", "max")], 1)
    assert r.stopped == 1 and len(r.hv) == 1  # the first configuration did not complete


def test_the_same_table_seed_and_flags_give_the_same_summary_in_a_fresh_process(tmp_path):
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"o{hash_seed}"
        cmd = [
            sys.executable, "-m", "lipsweep", "bench-search", "--table", str(TINY),
            *[f"--objective={n}:{d}" for n, d in OBJ3], "--replays", "2",
            "--method", "optuna-moasha", "--method", "random", "--out", str(out),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append((out / "summary.json").read_text())
    assert outs[0] == outs[1]


def test_a_committed_summary_row_regenerates_to_the_digit():
    """docs/bench_search/summary.json (docs/benchmarks.md gives its command): the moasha row
    whole, and optuna-moasha's first three replays, recomputed from the recorded table."""
    committed = json.loads((ROOT / "docs" / "bench_search" / "summary.json").read_text())
    table = replay.load_table(TINY)
    objectives = [tuple(o.split(":")) for o in committed["objectives"]]
    args = (table, objectives, committed["budget"])
    kw = dict(
        workers=committed["workers"],
        confidence=committed["confidence"],
        grace_period=committed["grace_period"],
        reduction_factor=committed["reduction_factor"],
    )
    summary, _ = replay.bench_search(*args, replays=committed["replays"], only=["moasha"], **kw)
    assert summary["methods"]["moasha"] == committed["methods"]["moasha"]
    summary, _ = replay.bench_search(*args, replays=3, only=["optuna-moasha"], **kw)
    for key in ("hv_fraction_at_budget", "compute_fraction_to_90", "stopped_compute_share"):
        got = summary["methods"]["optuna-moasha"][key]["per_replay"]
        assert got == committed["methods"]["optuna-moasha"][key]["per_replay"][:3], key


def test_seed_mean_leaves_out_a_failed_seed_rather_than_counting_it_as_zero():
    from lipsweep.search.protocol import seed_mean

    # by hand: (0.8 + 0.6) / 2 = 0.7 over the two seeds that finished (not 1.4 / 3 = 0.467)
    assert seed_mean([{"a": 0.8}, {"a": 0.6}, None], ["a"]) == {"a": pytest.approx(0.7)}
    # a seed without a finite value of every objective is left out the same way
    got = seed_mean([{"a": 0.8, "b": 2.0}, {"a": float("nan"), "b": 1.0}, {"a": 0.5}], ["a", "b"])
    assert got == {"a": pytest.approx(0.8), "b": pytest.approx(2.0)}
    assert seed_mean([None, None], ["a"]) is None
