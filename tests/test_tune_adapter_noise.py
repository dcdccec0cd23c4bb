"""The Ray Tune adapter hands a noise-aware core the standard errors the probes log beside
their values (``<metric>_se``): with one seed per configuration that is the only noise
``moasha`` has, and without it a live one-seed sweep stops nothing. No Ray is started (the
adapter is driven by hand)."""

from __future__ import annotations

from types import SimpleNamespace

from lipsweep.search.schedulers.moasha import MoAsha, group_key
from lipsweep.search.schedulers.stop_reason import MEASUREMENT, TIED
from lipsweep.sweep.schedulers._tune import CoreScheduler


def _trial(tid: str, lr: float) -> SimpleNamespace:
    return SimpleNamespace(trial_id=tid, config={"trial": {"lr": lr, "seed": 0}})


def test_one_seed_stops_on_measurement_noise_with_pgd_tied_at_zero():
    metrics = ["acc_clean", "probe_acc_pgd_4"]
    core = MoAsha(metrics, ["max", "max"], 1, 2, 4, seeds=1, trend=False)
    sched = CoreScheduler(core, group_key)
    a, b = _trial("a", 1e-3), _trial("b", 1e-5)
    for t in (a, b):
        sched.on_trial_add(None, t)
    report = {"epoch": 1, "probe_acc_pgd_4": 0.0, "probe_acc_pgd_4_se": 0.53}
    assert sched.on_trial_result(None, a, {**report, "acc_clean": 80.0, "acc_clean_se": 1.0})
    decision = sched.on_trial_result(None, b, {**report, "acc_clean": 70.0, "acc_clean_se": 1.0})
    assert decision == "STOP"
    reason = core.reason("b")
    assert reason.noise_kinds == (MEASUREMENT, TIED)
    assert "beyond measurement noise" in reason.text()
    assert core.measured["b"][0] == [1.0, 0.53]
