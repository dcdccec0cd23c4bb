"""Behaviours of the scheduler state, the replay's scoring and the Optuna searcher that a small
change to the code would alter: the scheduler core's state round trip (seeds that ended
included), the Ray Tune adapter saving each trial's end and reading the saved state on
``--resume``, the compute of a stopped trial, the median over replays (None = never, the
lower/upper mean for an even count), the budget being inclusive, and NSGA-II as the
``optuna`` searcher's sampler for several objectives. No Ray is started here (the adapter is
driven by hand)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lipsweep.search import replay
from lipsweep.search.schedulers.moasha import CONTINUE, MoAsha


def _seeded_core() -> MoAsha:
    """Two configurations of two seeds each: c0's seed a ended before its first rung."""
    core = MoAsha(["m"], ["max"], 1, 2, 8, {"c0": 2, "c1": 2})
    core.add("a", "c0")
    core.on_complete("a")
    core.on_result("b", "c0", 1, {"m": 1.0})
    core.on_result("c", "c1", 1, {"m": 2.0})
    return core


def test_the_state_round_trip_keeps_every_field_seeds_that_ended_included():
    core = _seeded_core()
    state = json.loads(json.dumps(core.state()))
    assert state["ended"] == ["a"]
    twin = MoAsha.from_state(state)
    assert twin.state() == core.state()
    assert twin.ended == {"a"}
    # and it decides as the original does on what comes next
    for c in (core, twin):
        c.on_result("d", "c1", 1, {"m": 2.5})
    assert twin.state() == core.state()


def _adapter(tmp_path: Path, restore: bool = False):
    from lipsweep.search.schedulers.moasha import group_key
    from lipsweep.sweep.schedulers._tune import CoreScheduler

    core = MoAsha(["acc_clean"], ["max"], 1, 2, 8, {group_key({"lr": 1}): 2})
    return CoreScheduler(core, group_key, state_path=str(tmp_path / "s.json"), restore=restore)


def _trial(tid: str, seed: int) -> SimpleNamespace:
    return SimpleNamespace(trial_id=tid, config={"trial": {"lr": 1, "seed": seed}})


def test_the_tune_adapter_saves_a_trials_end_to_the_state_file(tmp_path):
    sched = _adapter(tmp_path)
    t0, t1 = _trial("t0", 0), _trial("t1", 1)
    sched.on_trial_add(None, t0)
    sched.on_trial_add(None, t1)
    sched.on_trial_result(None, t0, {"epoch": 1, "acc_clean": 0.5})
    sched.on_trial_complete(None, t0, {})
    assert json.loads((tmp_path / "s.json").read_text())["ended"] == ["t0"]
    sched.on_trial_error(None, t1)
    assert json.loads((tmp_path / "s.json").read_text())["ended"] == ["t0", "t1"]


def test_resume_reads_the_saved_scheduler_state_and_a_fresh_start_does_not(tmp_path):
    from lipsweep.search.schedulers import state_path
    from lipsweep.search.space import load_space
    from lipsweep.sweep.driver import _scheduler

    space = tmp_path / "s.yaml"
    space.write_text(
        "fixed: {epochs: 8}\ngrid: [{regularizer: none}]\nrepeat: {seed: [0, 1]}\n"
        "scheduler: {type: moasha, metrics: [acc_clean], modes: [max]}\n"
    )
    spec = load_space(space)
    opts = SimpleNamespace(storage=str(tmp_path), experiment="e", resume=False)
    first = _scheduler(spec, opts)
    t0 = _trial("t0", 0)
    t0.config = {"trial": spec.trials[0]}
    first.on_trial_add(None, t0)
    assert first.on_trial_result(None, t0, {"epoch": 1, "acc_clean": 0.5}) == "CONTINUE"
    first.on_trial_complete(None, t0, {})
    saved = json.loads(Path(state_path(str(tmp_path), "e")).read_text())
    assert saved["ended"] == ["t0"] and saved["reported"]["t0"]

    resumed = _scheduler(spec, SimpleNamespace(**{**vars(opts), "resume": True}))
    assert resumed.debug_string()  # its first use reads the saved state
    assert resumed.core.state() == saved
    fresh = _scheduler(spec, opts)
    fresh.debug_string()
    assert fresh.core.ended == set() and fresh.core.reported == {}


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


# ---------------------------------------------------------------- the optuna searcher
def test_optuna_with_several_objectives_samples_with_nsga2_and_tpe_for_one():
    import optuna

    from lipsweep.search.searchers import searcher_settings
    from lipsweep.sweep.searchers._optuna import sampler_for

    two = searcher_settings(
        "optuna", {"num_samples": 4, "metric": ["acc_clean", "acc_pgd_4"], "mode": ["max", "max"]}
    )
    one = searcher_settings("optuna", {"num_samples": 4, "metric": "acc_clean", "mode": "max"})
    assert isinstance(sampler_for("optuna", two), optuna.samplers.NSGAIISampler)
    assert isinstance(sampler_for("optuna", one), optuna.samplers.TPESampler)
    assert CONTINUE == "continue"
