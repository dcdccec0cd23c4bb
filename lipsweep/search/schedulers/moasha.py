"""``moasha``: multi-objective asynchronous successive halving, seed-aware and noise-aware.

Spelled ``scheduler: {type: moasha, metrics: [probe_acc_pgd_4, probe_lip_jacobian_median,
acc_clean], modes: [max, min, max], grace_period: 1, reduction_factor: 2, confidence: 0.9}``.

Lineage. ASHA (Li et al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020):
rungs at ``grace_period * reduction_factor**k`` epochs below ``max_t``; a trial reaching a rung
continues when it is in the top ``1/reduction_factor`` of what that rung has recorded, judged
asynchronously, when it arrives. MO-ASHA (Schmucker et al. 2021, arXiv 2106.12639): "top" for
several objectives is the NSGA-II order (Deb et al. 2002: non-dominated front, then crowding
distance, larger first). The noise test is the Bayesian reading of the two-sample t-test on
seed means with a pooled within-configuration variance (Student 1908; the pooling is that of a
one-way ANOVA): under a flat prior on the means and the reference prior ``p(sigma) ~ 1/sigma``,
the posterior of a difference of means, over its standard error, is Student's t with the pooled
degrees of freedom (Box & Tiao 1973, ch. 2), so ``T_df(gap / se)`` is the probability that one
configuration is ahead of another in a metric. Ahead in every metric is Pareto dominance, and
its probability is the "probability of dominance" of noisy multi-objective selection (Hughes
2001, "Evolutionary multi-objective ranking with uncertainty and noise", EMO 2001); the rule
bounds it from below by Boole's inequality (Frechet's lower bound), ``1 - sum_j (1 - P_j)``,
which holds whatever the dependence between the metrics' errors (Hughes multiplies them,
assuming independence). Stopping on it at a stated confidence is racing (Maron & Moore
1994/1997; Birattari et al. 2002): a candidate is dropped only once the evidence says it is
worse beyond the noise.

The rule, at a rung, for a configuration (its seeds together, :func:`group_key`):

1. It is judged as soon as any of its seeds reports at the rung, on the mean of the seeds that
   have, and judged again as each further seed arrives there: nothing waits for a slow or
   queued seed.
2. Quota (MO-ASHA; ``quota: true``, off by default): with ``n`` configurations recorded at the
   rung, it may stop only when at least ``ceil(n / reduction_factor)`` configurations are
   ordered strictly ahead of it. Off, the tests below decide alone (``reduction_factor`` still
   spaces the rungs): a configuration that arrives at a rung among few rivals, or in its top
   half, is not let through to the end on that alone.
3. Noise: it stops only if some configuration ``h`` dominates it beyond noise: ``P(h
   dominates g) >= 1 - sum_j (1 - T_df(gap_j / se_j)) >= threshold``, with ``gap_j`` how far
   ``h``'s seed mean is ahead of ``g``'s in metric ``j`` (its better direction positive),
   ``se_j`` the gap's standard error (``sqrt(se_h^2 + se_g^2)``, step 5) and ``T_df`` Student's
   t distribution function at the noise estimate's degrees of freedom (the normal one for
   measurement noise; :func:`dominance_probability`). Dominance is "no worse in every metric
   and better in at least one": an exact tie with no noise (gap 0, se 0) is no worse for
   certain but not better, and leaves the sum; a metric that is the same for every
   configuration at the rung (early PGD accuracy at 0 for every trial) orders nothing and is
   left out; with no metric left to be better in the probability is 0. A metric far ahead
   makes up for one that is only probably ahead (the doubt is spent where it is: Bonferroni
   would ask each metric for ``1 - (1 - confidence) / m``); one behind keeps the bound below
   1/2, so a configuration on the rung's front never stops (at a threshold above 1/2).
   Repeated looks and rivals: a configuration of ``S`` seeds is judged up to ``S`` times at
   each of the ``R`` rungs that can stop it (every rung, or every rung but the first with the
   trend test), each time against the ``n - 1`` other configurations at the rung, so each
   look asks ``threshold = 1 - (1 - confidence) / (S R (n - 1))`` of every rival (Bonferroni
   over all its looks and, within a look, over its rivals, :meth:`MoAsha.threshold`): over
   the whole run it is stopped wrongly, in favour of any rival, with probability at most
   ``1 - confidence``. ``rivals: false`` leaves out the ``n - 1``: the bound then holds per
   rival (the most probable dominator of many is taken with no correction).
4. Trend (``trend: true``, the default): ``h`` must also dominate ``g`` beyond noise, at the
   same threshold, one rung ahead: each seed's value is extrapolated linearly from the rung
   before, ``v_i + reach * (v_i - v_{i-1})`` with ``reach = (r_{i+1} - r_i) / (r_i -
   r_{i-1})`` (the next rung, or ``max_t`` after the last), and the test of step 3 is run on
   the seeds' extrapolated means (:meth:`MoAsha.trend_probability`), their noise from the
   seeds' extrapolated values or, with one seed, the measurement and rounding variance times
   ``(1 + reach)^2 + reach^2`` (the two rungs' errors read as independent). A configuration
   behind but closing in fast (a late bloomer: its early standing is not its final one) is
   left alone; one that keeps its distance stops. The first rung has no trend, so it stops
   nothing: the earliest stop is at the second rung.
5. The noise of a configuration's mean, per metric, is the first of:

   - **seeds** (the sweep repeats seeds and some configuration has two at the rung): the
     within-configuration variance of every configuration's seeds at the rung, pooled (``SS /
     df``, ``df`` = seeds minus configurations), at least the seeds' own measurement variance
     (below) and the rounding's (``step / sqrt(12)``, :meth:`MoAsha.rounding_noise`: an
     accuracy on 200 images moves by 0.5, and seeds that tie exactly are not certainty), over
     the configuration's seed count. The prior is the reference prior above, with no
     pseudo-observations; with few seeds the t distribution's heavy tails are the caution (at
     ``df`` = 1 it is Cauchy), and they thin as the sweep adds seeds.
   - **measurement** (every configuration at the rung reported ``<metric>_se``, the standard
     error the probe itself carries: an accuracy on ``n`` images its Agresti-Coull binomial
     one, a median over ``m`` images its order-statistic one, :mod:`lipsweep.core.measurement`):
     the mean of its seeds' ``se^2`` over their count, read as normal. This is what a sweep
     with one seed per configuration knows.
   - otherwise **none**: unknown (in a sweep that repeats seeds, until the rung has a repeat),
     and nothing stops on it: a stop needs a noise estimate in every metric that orders the
     rung (comparing values as exact lost a front configuration in 90-100% of one-seed
     replays of the recorded grids, docs/benchmarks.md).
6. A stopped configuration stops every seed: running ones at their next report, ones not
   started yet before they start. Its reason names the configurations ahead beyond noise,
   the most probable first, by how much per metric and with what probability of dominance
   (now and, with the trend test, one rung on), the noise and where it came from (seeds,
   measurement, none), the confidence and the quota.

Where evidence is strong (noise small against the gaps, trends parallel) the rule stops the
dominated configurations; where configurations overlap in noise, or one is closing in, it
keeps its hands off them. ``confidence`` None is MO-ASHA's quota alone (crowded-out front
members stop too), as for ``asha``, which is this core on one metric with each trial its own
configuration.

Assumptions: a metric's seed noise at a rung is about the same for every configuration
(pooled), and roughly normal (the t distribution); a logged ``<metric>_se`` is the whole
noise of one seed's value around its configuration's (a probe's image sample; not the
epoch-to-epoch wobble of training, which the seeds see); nothing about how the metrics'
errors depend on each other (the bound holds for any dependence); a configuration's curve
moves, over the next rung, no further than the linear extrapolation of its last rung and its
noise allow (a curve that turns later than that misleads the trend test; ASHA's assumption,
that the per-epoch metrics at a rung rank configurations as their final objectives will, is
what the trend test relaxes by one rung). The error bound is over all of a configuration's
looks and rivals and is about noise only: a configuration whose standing changes after the
rung beyond its trend (a late bloomer) is not covered by it, and the replay measures how often
that costs a front configuration (docs/benchmarks.md: front kept, front configurations
stopped).

A report whose values are missing or not finite is not recorded (the trial continues; its
next report at or past the rung may be): a failed measurement is not a worst case.

The decision logic is :class:`MoAsha`, plain Python and numpy with no Ray, a member of the
search protocol (:mod:`lipsweep.search.protocol`: ``decide`` / ``report``), so the replay
benchmark drives the same object as a live sweep; the member's factory
(``lipsweep.search.schedulers.cores:create_moasha``) returns it in a ``Decider``, which the
sweep wraps in the family's Ray Tune adapter. Its state is a JSON-able dict
(:meth:`MoAsha.state`, :meth:`MoAsha.from_state`), saved beside Tune's experiment so that
``--resume`` continues with every rung's records.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from lipsweep.core.config_base import finite
from lipsweep.core.dominance import crowding_distance, non_dominated_ranks
from lipsweep.core.metric_names import se_metric
from lipsweep.search.schedulers.evidence import dominance_probability
from lipsweep.search.schedulers.moasha_settings import MoashaSettings
from lipsweep.search.schedulers.stop_reason import (
    MEASUREMENT,
    NONE,
    SEEDS,
    TIED,
    StopReason,
    reason_from,
    reason_state,
)

CONTINUE, STOP = "continue", "stop"
SEED_KEY = "seed"
"""The setting that tells the repeats of one configuration apart (``repeat: {seed: [...]}``)."""


def group_key(flat: Mapping[str, Any]) -> str:
    """The configuration a trial's flat config belongs to: the config without ``seed``."""
    rest = {str(k): v for k, v in flat.items() if k != SEED_KEY}
    return json.dumps(rest, sort_keys=True, default=str)


class MoAsha:
    """The decision logic of ``moasha`` (module docstring), with no Ray: a scheduler member of
    the search protocol.

    Drive it with :meth:`decide` for each per-epoch report, in the order they arrive (``t``
    = 0 asks whether a trial may start), and :meth:`report` when a trial ends (finished,
    stopped or failed). ``expected`` gives a configuration's number of seeds, by
    :func:`group_key`; ``seeds`` the number for configurations it does not list (a learning
    searcher's draws). ``confidence`` None: MO-ASHA's quota alone, never the noise test.
    """

    def __init__(
        self,
        metrics: Sequence[str],
        modes: Sequence[str],
        grace_period: int,
        reduction_factor: float,
        max_t: int,
        expected: Optional[Mapping[str, int]] = None,
        confidence: Optional[float] = MoashaSettings.confidence,
        seeds: int = 1,
        trend: bool = MoashaSettings.trend,
        quota: bool = MoashaSettings.quota,
        rivals: bool = MoashaSettings.rivals,
    ) -> None:
        self.metrics = tuple(metrics)
        self.modes = tuple(modes)
        self.reduction_factor = float(reduction_factor)
        self.max_t = max_t
        rungs, r = [], float(grace_period)
        while r < max_t:  # a rung at max_t would stop a trial that has nothing left to run
            rungs.append(r)
            r *= self.reduction_factor
        self.rungs = tuple(rungs)
        self.expected = dict(expected or {})
        self.seeds = int(seeds)
        self.confidence = confidence
        self.trend, self.quota, self.rivals = bool(trend), bool(quota), bool(rivals)
        self.sign = np.where(np.asarray(self.modes) == "max", 1.0, -1.0)
        """Per metric, +1 where larger is better and -1 where smaller is: gaps times ``sign``
        are how far ahead (positive) one configuration is of another."""
        self.group_of: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.ended: set[str] = set()
        self.reported: dict[str, dict[int, list[float]]] = {}  # trial -> rung -> values
        self.measured: dict[str, dict[int, list[float]]] = {}  # trial -> rung -> SEs (NaN: none)
        self.stopped: dict[str, StopReason] = {}  # group -> why
        self.told_stop: set[str] = set()
        self.changes = 0
        """Counts changes of :meth:`state` (an adapter saves the state when it moved)."""

    @classmethod
    def from_settings(
        cls,
        s: "MoashaSettings",
        max_t: int,
        expected: Optional[Mapping[str, int]] = None,
        seeds: int = 1,
    ) -> "MoAsha":
        return cls(
            s.metrics, s.modes, s.grace_period, s.reduction_factor, max_t, expected,
            s.confidence, seeds, s.trend, s.quota, s.rivals,
        )  # fmt: skip

    @property
    def repeats(self) -> bool:
        """Whether the sweep runs several seeds of a configuration (so sees seed noise)."""
        return self.seeds > 1 or any(n > 1 for n in self.expected.values())

    # -- the protocol ----------------------------------------------------------------------
    def add(self, trial: str, group: str) -> None:
        """Register ``trial`` as a seed of configuration ``group`` (also done by decide)."""
        if trial in self.group_of:
            return
        self.group_of[trial] = group
        self.members.setdefault(group, []).append(trial)
        self.reported[trial] = {}
        self.changes += 1

    def decide(self, trial: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        """``"continue"`` or ``"stop"`` for ``trial`` after its report at ``t`` epochs."""
        self.add(trial, group)
        if trial in self.ended:  # it reports again: retried after a worker failure
            self.ended.discard(trial)
            self.changes += 1
        group = self.group_of[trial]
        if group not in self.stopped and 0 < t < self.max_t:
            rung = self._rung(trial, t)
            values = [metrics.get(m) for m in self.metrics]
            if rung is not None and all(finite(v) for v in values):
                self.reported[trial][rung] = [float(v) for v in values]
                ses = [metrics.get(se_metric(m)) for m in self.metrics]
                self.measured.setdefault(trial, {})[rung] = [
                    float(v) if finite(v) and v >= 0 else math.nan for v in ses
                ]
                self.changes += 1
                reason = self._decide(rung, group)
                if reason is not None:
                    self.stopped[group] = reason
        if group in self.stopped:
            self.changes += trial not in self.told_stop
            self.told_stop.add(trial)
            return STOP
        return CONTINUE

    def report(self, trial: str, result: Optional[Mapping[str, Any]] = None) -> None:
        """``trial`` ended (finished, stopped, or failed: Tune reports a failure it will retry
        the same way, and a retried trial that reports again counts again)."""
        if trial in self.group_of and trial not in self.ended:
            self.ended.add(trial)
            self.changes += 1

    # the names the adapter and older callers use
    on_result = decide

    def on_complete(self, trial: str) -> None:
        self.report(trial)

    def reason(self, trial: str) -> Optional[StopReason]:
        """Why ``trial``'s configuration was stopped, or None."""
        return self.stopped.get(self.group_of.get(trial, ""))

    # -- rungs ---------------------------------------------------------------------------
    def _rung(self, trial: str, t: float) -> Optional[int]:
        """The highest rung at or below ``t`` that ``trial`` has not reported at, if it has
        reported at none above it (as Ray's ASHA records a result)."""
        for i in reversed(range(len(self.rungs))):
            if t >= self.rungs[i]:
                return None if i in self.reported[trial] else i
        return None

    def rung_table(self, i: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """The configurations recorded at rung ``i`` (in the order they arrived), their seed
        means (n, m), seed counts (n,) and within-configuration sums of squares (n, m)."""
        seen: dict[str, list[list[float]]] = {}
        for trial, rungs in self.reported.items():
            if i in rungs:
                seen.setdefault(self.group_of[trial], []).append(rungs[i])
        names = list(seen)
        return (names, *self._summary(seen, names))

    def _summary(
        self, seen: Mapping[str, Sequence[Any]], names: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per configuration of ``names``, the mean (n, m), count (n,) and within-configuration
        sum of squares (n, m) of its seeds' values in ``seen``; zeros where it has none."""
        m = len(self.metrics)
        means, counts, ss = (
            np.zeros((len(names), m)),
            np.zeros(len(names)),
            np.zeros((len(names), m)),
        )
        for k, g in enumerate(names):
            if g in seen:
                x = np.asarray(seen[g], dtype=float)
                means[k], counts[k] = x.mean(axis=0), len(x)
                ss[k] = ((x - means[k]) ** 2).sum(axis=0)
        return means, counts, ss

    def noise(
        self, means: np.ndarray, counts: np.ndarray, ss: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """Seed noise per metric (a pooled standard deviation, (m,)) and its degrees of
        freedom, from a rung's table (:meth:`rung_table`; module docstring, step 5): infinite
        at 0 degrees of freedom (no configuration has two seeds at the rung yet)."""
        df = float(np.sum(np.maximum(counts - 1, 0)))
        if df <= 0:
            return np.full(means.shape[1], np.inf), 0.0
        return np.sqrt(ss.sum(axis=0) / df), df

    def rounding_noise(self, i: int) -> np.ndarray:
        """Per metric, the standard deviation that rounding alone puts into rung ``i``'s values
        (module docstring, step 5): ``step / sqrt(12)``, the spread of a uniform error over one
        step (Sheppard 1898), with ``step`` the finest gap between two distinct recorded
        values; 0 where fewer than two distinct values were recorded."""
        values = np.array([r[i] for r in self.reported.values() if i in r], dtype=float)
        out = np.zeros(len(self.metrics))
        for j in range(len(self.metrics)):
            distinct = np.unique(values[:, j]) if len(values) else values
            if len(distinct) > 1:
                out[j] = float(np.min(np.diff(distinct))) / math.sqrt(12.0)
        return out

    @property
    def stopping_rungs(self) -> int:
        """The rungs at which a configuration can be stopped: every rung, or with the trend
        test every rung but the first (no trend there yet); at least 1."""
        return max(1, len(self.rungs) - int(self.trend))

    def looks(self, group: str) -> int:
        """How often ``group`` can be judged: once per seed's arrival at each rung that can
        stop it (:attr:`stopping_rungs`)."""
        return max(1, int(self.expected.get(group, self.seeds))) * self.stopping_rungs

    def threshold(self, group: str, rivals: int = 1) -> float:
        """The probability of dominance a stop of ``group`` needs, against each of the
        ``rivals`` configurations it is compared with, at one look (module docstring, step
        3): ``1 - (1 - confidence) / (looks rivals)``, Bonferroni over all its looks
        (:meth:`looks`) and, with ``rivals`` on, over the rivals of the look, so the chance
        that any of them stops it wrongly is at most ``1 - confidence``."""
        spread = self.looks(group) * (max(1, rivals) if self.rivals else 1)
        return 1.0 - (1.0 - float(self.confidence or 0.0)) / spread

    def measurement_variance(self, i: int, names: Sequence[str]) -> np.ndarray:
        """Per configuration of ``names`` at rung ``i`` and metric, the mean over its seeds of
        their reported measurement variance (``<metric>_se`` squared), (n, m); NaN where a
        seed reported no standard error."""
        out = np.zeros((len(names), len(self.metrics)))
        row = {g: k for k, g in enumerate(names)}
        seen = np.zeros(len(names))
        for trial, rungs in self.reported.items():
            k = row.get(self.group_of[trial])
            if i in rungs and k is not None:
                se = self.measured.get(trial, {}).get(i, [math.nan] * len(self.metrics))
                out[k] += np.square(np.asarray(se, dtype=float))
                seen[k] += 1
        return out / np.maximum(seen, 1)[:, None]

    def rung_noise(
        self,
        i: int,
        names: Sequence[str],
        means: np.ndarray,
        counts: np.ndarray,
        ss: np.ndarray,
        scale: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...], float]:
        """The noise of each configuration's mean at rung ``i`` (module docstring, step 5):
        its standard error (n, m), the degrees of freedom per metric (m,; inf: normal), the
        per-metric noise sd shown in a stop reason (m,), where each metric's noise comes from
        (:data:`SEEDS`, :data:`MEASUREMENT`, :data:`NONE`, :data:`TIED`) and the seed noise's
        degrees of freedom. ``scale`` multiplies the measurement and rounding variances (a
        trend's extrapolation, :meth:`trend_table`); a configuration with no seed in the
        table (count 0) has infinite noise."""
        n, m = means.shape
        sd_seed, df = self.noise(means, counts, ss)
        floor = self.rounding_noise(i) * math.sqrt(scale)
        mvar = self.measurement_variance(i, names) * scale  # (n, m)
        none = counts <= 0
        counts = np.maximum(counts, 1)
        se, dfs, shown, kinds = np.zeros((n, m)), np.full(m, np.inf), np.zeros(m), []
        for j in range(m):
            measured = bool(np.all(np.isfinite(mvar[:, j])))
            mv = np.where(np.isfinite(mvar[:, j]), mvar[:, j], 0.0)
            if np.ptp(means[:, j]) == 0:  # every configuration the same: it orders nothing
                kinds.append(TIED)
            elif df > 0 and self.repeats:
                var = np.maximum(max(sd_seed[j], floor[j]) ** 2, mv)
                se[:, j], dfs[j], shown[j] = np.sqrt(var / counts), df, np.sqrt(var.max())
                kinds.append(SEEDS)
            elif measured:
                se[:, j], shown[j] = np.sqrt(mv / counts), float(np.sqrt(mv.mean()))
                kinds.append(MEASUREMENT)
            else:  # unknown: seeds will come, or nothing tells it; nothing stops on it
                se[:, j], shown[j] = np.inf, np.inf
                kinds.append(SEEDS if self.repeats else NONE)
        se[none] = np.inf
        return se, dfs, shown, tuple(kinds), df

    def reach(self, i: int) -> float:
        """How many of rung ``i``'s trend steps (the epochs from rung ``i - 1`` to rung ``i``)
        reach the next rung (or ``max_t`` after the last): ``(r_{i+1} - r_i) / (r_i -
        r_{i-1})``, ``reduction_factor`` between geometric rungs."""
        nxt = self.rungs[i + 1] if i + 1 < len(self.rungs) else float(self.max_t)
        return (nxt - self.rungs[i]) / (self.rungs[i] - self.rungs[i - 1])

    def trend_table(
        self, i: int, names: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rung ``i``'s table one rung ahead (module docstring, step 4): per configuration of
        ``names``, the mean over its seeds that reported at rungs ``i - 1`` and ``i`` of their
        values extrapolated to the next rung, ``v_i + reach * (v_i - v_{i-1})``
        (:meth:`reach`), their count (0: none) and within-configuration sum of squares, as
        :meth:`rung_table` has them (``i`` >= 1)."""
        k = self.reach(i)
        seen: dict[str, list[np.ndarray]] = {}
        for trial, rungs in self.reported.items():
            if i in rungs and i - 1 in rungs:
                now, before = np.asarray(rungs[i]), np.asarray(rungs[i - 1])
                seen.setdefault(self.group_of[trial], []).append(now + k * (now - before))
        return self._summary(seen, names)

    def trend_probability(
        self, i: int, names: Sequence[str], me: int, ignore: np.ndarray
    ) -> np.ndarray:
        """Per configuration at rung ``i``, the bound on its probability of dominating
        configuration ``me`` one rung ahead (module docstring, step 4): the noise test on
        :meth:`trend_table`, its noise from the seeds' extrapolated values or, read as
        independent at the two rungs, the measurement and rounding noise times ``(1 +
        reach)^2 + reach^2``; ``ignore``: the metrics tied at the rung."""
        means, counts, ss = self.trend_table(i, names)
        k = self.reach(i)
        se, dfs, _, _, _ = self.rung_noise(i, names, means, counts, ss, (1 + k) ** 2 + k**2)
        gaps = (means - means[me]) * self.sign
        return dominance_probability(gaps, np.sqrt(se**2 + se[me] ** 2), dfs, ignore=ignore)

    def _decide(self, i: int, group: str) -> Optional[StopReason]:
        """None (continue) or why ``group`` stops at rung ``i`` (module docstring)."""
        names, means, counts, ss = self.rung_table(i)
        n = len(names)
        kept = math.ceil(n / self.reduction_factor)
        ranks = non_dominated_ranks(means, self.modes)  # (n,)
        crowd = np.zeros(n)
        for r in np.unique(ranks):
            front = np.flatnonzero(ranks == r)
            crowd[front] = crowding_distance(means[front])
        me = names.index(group)
        ahead = int(np.sum((ranks < ranks[me]) | ((ranks == ranks[me]) & (crowd > crowd[me]))))
        if ahead < kept and (self.confidence is None or self.quota):
            return None
        if self.confidence is not None and self.trend and i == 0:
            return None  # no trend yet
        gaps = (means - means[me]) * self.sign  # (n, m): how far each is ahead of me, per metric
        base = dict(
            epoch=self.rungs[i], front=int(ranks[me]), ahead=ahead, kept=kept, of=n,
            seeds=int(counts[me]), metrics=self.metrics,
        )  # fmt: skip
        if self.confidence is None:  # MO-ASHA's quota alone
            dom = dominance_probability(gaps, np.zeros_like(gaps), np.inf) >= 1.0
            by = tuple(self.members[g][0] for g, d in zip(names, dom) if d and g != group)
            return StopReason(dominated_by=by, **base)
        se, dfs, shown, kinds, df = self.rung_noise(i, names, means, counts, ss)
        pair = np.sqrt(se**2 + se[me] ** 2)  # (n, m): the standard error of each gap
        prob = dominance_probability(gaps, pair, dfs, ignore=np.asarray(kinds) == TIED)
        prob[me] = 0.0
        need = self.threshold(group, n - 1)
        beyond = np.flatnonzero(prob >= need)
        trend = np.ones(n)
        if len(beyond) and self.trend:
            trend = self.trend_probability(i, names, me, np.asarray(kinds) == TIED)
            beyond = beyond[trend[beyond] >= need]
        if not len(beyond):
            return None
        beyond = beyond[np.argsort(-prob[beyond], kind="stable")]
        return StopReason(
            dominated_by=tuple(self.members[names[k]][0] for k in beyond),
            margins=tuple(tuple(float(v) for v in gaps[k]) for k in beyond),
            noise=tuple(float(v) for v in shown),
            noise_seeds=int(counts.sum()),
            noise_df=int(round(df)),
            confidence=float(self.confidence),
            need=float(need),
            probabilities=tuple(float(prob[k]) for k in beyond),
            trend_probabilities=tuple(float(trend[k]) for k in beyond) if self.trend else (),
            noise_kinds=kinds,
            **base,
        )

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything decided and recorded so far, JSON-able (:meth:`from_state`)."""
        return {
            "version": 3,
            "metrics": list(self.metrics),
            "modes": list(self.modes),
            "reduction_factor": self.reduction_factor,
            "max_t": self.max_t,
            "rungs": list(self.rungs),
            "expected": self.expected,
            "seeds": self.seeds,
            "confidence": self.confidence,
            "trend": self.trend,
            "quota": self.quota,
            "rivals": self.rivals,
            "members": self.members,
            "ended": sorted(self.ended),
            "reported": {t: {str(i): v for i, v in r.items()} for t, r in self.reported.items()},
            "measured": {
                t: {str(i): [None if math.isnan(x) else x for x in v] for i, v in r.items()}
                for t, r in self.measured.items()
            },
            "stopped": {g: reason_state(r) for g, r in self.stopped.items()},
            "told_stop": sorted(self.told_stop),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "MoAsha":
        """The core as :meth:`state` saved it."""
        core = cls(
            state["metrics"],
            state["modes"],
            1,
            state["reduction_factor"],
            state["max_t"],
            state["expected"],
            state.get("confidence"),
            state.get("seeds", 1),
            state.get("trend", False),  # a state that names neither: the noise test at
            state.get("quota", True),  # the rung alone, with MO-ASHA's quota,
            state.get("rivals", False),  # per rival
        )
        core.rungs = tuple(float(r) for r in state["rungs"])
        core.members = {g: list(ts) for g, ts in state["members"].items()}
        core.group_of = {t: g for g, ts in core.members.items() for t in ts}
        core.ended = set(state["ended"])
        core.reported = {
            t: {int(i): list(v) for i, v in r.items()} for t, r in state["reported"].items()
        }
        core.measured = {
            t: {int(i): [math.nan if x is None else float(x) for x in v] for i, v in r.items()}
            for t, r in state.get("measured", {}).items()
        }
        core.stopped = {g: reason_from(r) for g, r in state["stopped"].items()}
        core.told_stop = set(state["told_stop"])
        return core


def expected_seeds(trials: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many trials (seeds) each configuration of a space's expanded trials has."""
    out: dict[str, int] = {}
    for flat in trials:
        key = group_key(flat)
        out[key] = out.get(key, 0) + 1
    return out
