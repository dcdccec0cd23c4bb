"""``moasha``'s evidence: dominance with ties, the measurement noise a probe carries
(``<metric>_se``), how it combines with seed noise, the trend test, the quota and the looks
a confidence is spread over. Hand computations throughout: Phi is the normal distribution
function, a Cauchy T(z) = 1/2 + atan(z) / pi."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lipsweep.core.config_base import ConfigError
from lipsweep.core.measurement import accuracy_se, median_se
from lipsweep.search.schedulers import scheduler_settings
from lipsweep.search.schedulers.evidence import dominance_probability
from lipsweep.search.schedulers.moasha import (
    CONTINUE,
    STOP,
    MoAsha,
)
from lipsweep.search.schedulers.moasha_settings import MoashaSettings

PHI = {0.707: 0.7602499, 1.414: 0.9213504, 3.536: 0.9997965, 1.0: 0.8413447}


def _one_seed(metrics=("m",), modes=("max",)) -> MoAsha:
    return MoAsha(metrics, modes, 1, 2.0, 2, {"A": 1, "B": 1, "C": 1}, 0.8, trend=False, quota=True)


def test_an_exact_tie_without_noise_is_no_worse_but_never_ahead_alone():
    """Gaps (0, 0) with no noise: nothing better, P = 0. Gaps (0, 1), no noise: dominance,
    P = 1. Gaps (0, 1), se (0, 1) normal: the tie leaves the sum, P = Phi(1) = 0.84134."""
    got = dominance_probability(np.array([[0.0, 0.0], [0.0, 1.0]]), np.zeros(2), np.inf)
    assert list(got) == [0.0, 1.0]
    one = dominance_probability(np.array([[0.0, 1.0]]), np.array([0.0, 1.0]), np.inf)
    assert one[0] == pytest.approx(PHI[1.0], abs=1e-6)


def test_a_configuration_tied_in_one_metric_and_behind_in_another_stops():
    """One seed, each value measured exactly (se 0), a max and b min: A (a 5, b 1), C (4, 0)
    and B (5, 2): A ties B in a and is better in b, so it dominates B, which stops (A and C on
    the front ahead of it, 2 of 3 kept). Without any ``_se`` nothing says how exact the
    values are, and B continues."""
    exact = {"a_se": 0.0, "b_se": 0.0}
    for known, decision in ((exact, STOP), ({}, CONTINUE)):
        core = _one_seed(("a", "b"), ("max", "min"))
        assert core.decide("a0", "A", 1, {"a": 5.0, "b": 1.0, **known}) == CONTINUE
        assert core.decide("c0", "C", 1, {"a": 4.0, "b": 0.0, **known}) == CONTINUE
        assert core.decide("b0", "B", 1, {"a": 5.0, "b": 2.0, **known}) == decision
    assert core.reason("b0") is None


def test_one_seed_stops_only_beyond_the_measurement_noise():
    """One seed each, se 1 each: the gap's se is sqrt(2). C (10) against A (11): Phi(1 /
    sqrt 2) = 0.760 < 0.8, C continues. Against A (12): Phi(2 / sqrt 2) = 0.921, C stops."""
    for a, decision in ((11.0, CONTINUE), (12.0, STOP)):
        core = _one_seed()
        core.decide("a0", "A", 1, {"m": a, "m_se": 1.0})
        assert core.decide("c0", "C", 1, {"m": 10.0, "m_se": 1.0}) == decision
    why = core.reason("c0")
    assert why is not None
    assert why.probabilities == (pytest.approx(PHI[1.414], abs=1e-6),)
    assert why.noise_kinds == ("measurement",) and why.noise == (pytest.approx(1.0),)
    assert "beyond measurement noise at 80% confidence" in why.text()
    assert "measurement noise (se) m 1" in why.text()


def test_a_metric_tied_at_zero_for_every_trial_does_not_block_stops():
    """Early PGD accuracy 0 for every trial, with its nonzero measurement se (0.5314 on 256
    images): it orders nothing and is left out; clean 80 against 75, se 1 each: Phi(5 /
    sqrt 2) = 0.9998, and C stops on clean accuracy alone."""
    core = _one_seed(("pgd", "clean"), ("max", "max"))
    pgd_se = accuracy_se(0.0, 256)
    core.decide("a0", "A", 1, {"pgd": 0.0, "pgd_se": pgd_se, "clean": 80.0, "clean_se": 1.0})
    got = core.decide("c0", "C", 1, {"pgd": 0.0, "pgd_se": pgd_se, "clean": 75.0, "clean_se": 1})
    assert got == STOP
    why = core.reason("c0")
    assert why.noise_kinds == ("tied", "measurement")
    assert why.probabilities == (pytest.approx(PHI[3.536], abs=1e-6),)
    assert "pgd tied at the rung (left out)" in why.text()


def test_the_stop_reason_lists_the_most_probable_dominator_first():
    """A (12) arrives before B (15); C (10): P(A) = Phi(2 / sqrt 2) = 0.921, P(B) = Phi(5 /
    sqrt 2) = 0.9998 (3 at the rung, 2 kept, 2 ahead): B is listed first."""
    core = _one_seed()
    core.decide("a0", "A", 1, {"m": 12.0, "m_se": 1.0})
    core.decide("b0", "B", 1, {"m": 15.0, "m_se": 1.0})
    assert core.decide("c0", "C", 1, {"m": 10.0, "m_se": 1.0}) == STOP
    why = core.reason("c0")
    assert why.dominated_by == ("b0", "a0")
    assert why.probabilities == (
        pytest.approx(PHI[3.536], abs=1e-6), pytest.approx(PHI[1.414], abs=1e-6),
    )  # fmt: skip
    assert why.text().index("b0") < why.text().index("a0")


def test_seed_noise_is_at_least_the_measurement_noise():
    """A's seeds 10 and 10.2 (pooled sd 0.1414 at 1 df), each measured with se 2; C's first
    seed 2, se 2. Per-seed variance max(0.02, 4) = 4: A's mean has se 2 / sqrt 2, C's 2, the
    gap's sqrt(2 + 4); z = 8.1 / sqrt 6 = 3.307, Cauchy: 0.90652 (seed noise alone: 0.99319)."""
    core = MoAsha(("m",), ("max",), 1, 2.0, 2, {"A": 2, "C": 2}, 0.8, trend=False, quota=True)
    core.decide("a0", "A", 1, {"m": 10.0, "m_se": 2.0})
    core.decide("a1", "A", 1, {"m": 10.2, "m_se": 2.0})
    assert core.decide("c0", "C", 1, {"m": 2.0, "m_se": 2.0}) == STOP
    why = core.reason("c0")
    p = 0.5 + math.atan(8.1 / math.sqrt(6)) / math.pi
    assert why.probabilities == (pytest.approx(p),) and p == pytest.approx(0.90652, abs=1e-5)
    assert why.noise_kinds == ("seeds",) and "beyond seed noise" in why.text()
    assert why.noise == (pytest.approx(2.0),)
    twin = MoAsha.from_state(json.loads(json.dumps(core.state())))
    assert twin.measured == core.measured and twin.reason("c0") == why


def test_the_measurement_standard_errors_match_a_hand_computation():
    """Agresti-Coull, 0% on 256 images: n~ = 259.8416, p~ = 1.9208 / n~ = 0.0073922, SE =
    100 sqrt(p~ (1 - p~) / n~) = 0.5314 points (the Wald SE would be 0). 50% on 100: p~ =
    0.5, SE = 100 sqrt(0.25 / 103.8416) = 4.9066. The median of 1..16: ranks 8 -+ 2, the
    7th and 10th values, SE (10 - 7) / 2 = 1.5."""
    assert accuracy_se(0.0, 256) == pytest.approx(0.53140, abs=1e-5)
    assert accuracy_se(50.0, 100) == pytest.approx(4.90664, abs=1e-5)
    assert median_se(list(range(16, 0, -1))) == 1.5
    assert median_se([3.0]) == 0.0


# --------------------------------------------------------------------------- trend, quota, looks


def _report(core: MoAsha, trial: str, t: int, m: float) -> str:
    """One seed's report at epoch ``t``: ``m`` measured with a standard error of 0.5."""
    return core.decide(trial, trial.upper(), t, {"m": m, "m_se": 0.5})


def test_a_stop_needs_the_dominator_ahead_after_one_rung_of_both_trends():
    """Rungs 1, 2, 4 (max_t 8), one seed each, measurement se 0.5: a look needs 1 - 0.1 / 2
    (two rungs can stop: not the first, which has no trend). Epoch 1: A 20, B 10, C 10; nothing
    stops (no trend yet). Epoch 2: A 22, B 12, C 18. Both are beyond noise behind A now (B by
    10, C by 4: z = 4 / sqrt(0.5) = 5.66). One rung on (reach (4 - 2) / (2 - 1) = 2): A 26, B
    16, C 34; their se sqrt(0.25 * (3^2 + 2^2)) = 1.803 each: B is 10 / 2.55 = 3.92 behind,
    P = Phi(3.92) = 0.99996 >= 0.95, and stops; C, closing in by 6 a rung, is 8 ahead of A
    there: it continues. Without the trend test C stops at epoch 2 (and at epoch 1)."""
    core = MoAsha(("m",), ("max",), 1, 2.0, 8, {"A": 1, "B": 1, "C": 1}, 0.9)
    assert core.stopping_rungs == 2 and core.threshold("C") == pytest.approx(0.95)
    for trial, m in (("a", 20.0), ("b", 10.0), ("c", 10.0)):
        assert _report(core, trial, 1, m) == CONTINUE
    assert _report(core, "a", 2, 22.0) == CONTINUE
    assert _report(core, "c", 2, 18.0) == CONTINUE
    assert _report(core, "b", 2, 12.0) == STOP
    why = core.reason("b")
    p = 0.5 * (1 + math.erf(10 / math.sqrt(2 * 0.25 * 13) / math.sqrt(2)))
    assert why.dominated_by == ("a", "c")  # C, 6 ahead now, is 18 ahead a rung on
    assert why.trend_probabilities[0] == pytest.approx(p) and p > 0.9999
    assert "after a rung of both trends >= 1.00" in why.text()
    plain = MoAsha(("m",), ("max",), 1, 2.0, 8, {"A": 1, "B": 1, "C": 1}, 0.9, trend=False)
    _report(plain, "a", 1, 20.0)
    assert _report(plain, "c", 1, 10.0) == STOP


def test_without_the_quota_a_configuration_dominated_beyond_noise_stops_in_the_top_half():
    """Epoch 1 (no trend test): A 30, B 20, D 5, se 0.5: 3 configurations, 2 kept by MO-ASHA's
    quota; B has 1 ahead, so the quota keeps it though A is 10 ahead (z 14): with ``quota``
    it continues, without (the default) it stops."""
    for quota, decision in ((True, CONTINUE), (False, STOP)):
        core = MoAsha(("m",), ("max",), 1, 2.0, 2, {}, 0.9, trend=False, quota=quota)
        for trial, m in (("a", 30.0), ("d", 5.0)):
            _report(core, trial, 1, m)
        assert _report(core, "b", 1, 20.0) == decision
    assert (MoashaSettings.trend, MoashaSettings.quota) == (True, False)


def test_the_confidence_is_spread_over_every_look_at_every_rung_that_can_stop():
    """Three seeds, rungs 1, 2, 4: 3 x 2 looks with the trend test (the first rung cannot
    stop), 3 x 3 without; a look needs 1 - (1 - confidence) / looks."""
    trend = MoAsha(("m",), ("max",), 1, 2.0, 8, {"A": 3}, 0.9)
    plain = MoAsha(("m",), ("max",), 1, 2.0, 8, {"A": 3}, 0.9, trend=False)
    assert trend.threshold("A") == pytest.approx(1 - 0.1 / 6)
    assert plain.threshold("A") == pytest.approx(1 - 0.1 / 9)
    assert trend.threshold("A", 4) == pytest.approx(1 - 0.1 / 24)


def test_the_confidence_is_spread_over_the_rivals_of_a_look():
    """One seed each, se 1, one rung: C (10) against rivals at 12, Phi(2 / sqrt 2) = 0.921
    each. Three rivals: a look needs 1 - 0.2 / 3 = 0.933 of each, C continues; per rival
    (``rivals: false``) 0.8, it stops. Two rivals: 1 - 0.2 / 2 = 0.9, it stops."""
    for rivals, spread, decision in ((("A", "B", "D"), True, CONTINUE),
                                     (("A", "B", "D"), False, STOP),
                                     (("A", "B"), True, STOP)):  # fmt: skip
        core = MoAsha(
            ("m",), ("max",), 1, 2.0, 2, None, 0.8, trend=False, quota=False, rivals=spread
        )
        for g in rivals:
            assert core.decide(f"{g}0", g, 1, {"m": 12.0, "m_se": 1.0}) == CONTINUE
        assert core.decide("c0", "C", 1, {"m": 10.0, "m_se": 1.0}) == decision
    why = core.reason("c0")
    assert why is not None and why.need == pytest.approx(0.9)
    assert "this look needed P >= 0.9)" in why.text()


def test_trend_quota_and_rivals_are_settings_and_survive_the_state_file():
    base = {"type": "moasha", "metrics": ["m"], "modes": ["max"]}
    for key in ("trend", "quota", "rivals"):
        with pytest.raises(ConfigError, match=f"scheduler.{key}"):
            scheduler_settings({**base, key: "yes"})
    s = scheduler_settings({**base, "trend": False, "quota": True, "rivals": False})
    core = MoAsha.from_settings(s, 8)
    assert (core.trend, core.quota, core.rivals) == (False, True, False)
    again = MoAsha.from_state(json.loads(json.dumps(core.state())))
    assert (again.trend, again.quota, again.rivals) == (False, True, False)
    default = MoAsha.from_state(MoAsha(["m"], ["max"], 1, 2.0, 8).state())
    assert (default.trend, default.quota, default.rivals) == (True, False, True)
    bare = {k: v for k, v in default.state().items() if k not in ("trend", "quota", "rivals")}
    old = MoAsha.from_state(bare)
    assert (old.trend, old.quota, old.rivals) == (False, True, False)
