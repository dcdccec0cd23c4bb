"""``moasha``: multi-objective asynchronous successive halving, seed-aware and noise-aware.

Spelled ``scheduler: {type: moasha, metrics: [probe_acc_pgd_4, probe_lip_jacobian_median,
acc_clean], modes: [max, min, max], grace_period: 1, reduction_factor: 2, confidence: 0.8}``.

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
2. Quota (MO-ASHA): with ``n`` configurations recorded at the rung, it may stop only when at
   least ``ceil(n / reduction_factor)`` configurations are ordered strictly ahead of it.
3. Noise (where the sweep repeats seeds): it stops only if some configuration ``h`` dominates
   it beyond seed noise: ``P(h dominates g) >= 1 - sum_j (1 - T_df(gap_j / (s_j * sqrt(1/n_h
   + 1/n_g)))) >= confidence``, with ``gap_j`` how far ``h``'s seed mean is ahead of ``g``'s
   in metric ``j`` (its better direction positive), ``s_j`` the metric's seed noise at the
   rung, ``n`` the seeds each has there and ``T_df`` Student's t distribution function at the
   noise estimate's degrees of freedom (:func:`dominance_probability`). A metric far ahead
   makes up for one that is only probably ahead (the doubt is spent where it is: Bonferroni
   would ask each metric for ``1 - (1 - confidence) / m``); one behind keeps the bound below
   1/2.
4. Seed noise ``s_j`` is estimated from the sweep itself: the within-configuration variance of
   every configuration's seeds at the rung, pooled (``SS / df``, ``df`` = seeds minus
   configurations). The prior is the reference prior above, with no pseudo-observations: until
   some configuration has two seeds at the rung (``df`` = 0) the noise is unknown and nothing
   stops on it; with few seeds the t distribution's heavy tails are the caution (at ``df`` = 1
   it is Cauchy), and they thin as the sweep adds seeds. A metric measured in steps (an
   accuracy on 200 images moves by 0.5) can show seeds that tie exactly; its noise is then at
   least the rounding's, ``step / sqrt(12)`` (:meth:`MoAsha.rounding_noise`), so a tie is not
   read as certainty.
5. A stopped configuration stops every seed: running ones at their next report, ones not
   started yet before they start. Its reason names the configurations ahead beyond noise, by
   how much per metric and with what probability of dominance, the noise (and from how many
   seeds), the confidence and the quota.

Where evidence is strong (noise small against the gaps) the rule is MO-ASHA's quota with the
dominated configurations stopped; where configurations overlap in noise it keeps its hands
off them. A sweep without seed repeats (each configuration one seed) cannot see seed noise:
there the rule is MO-ASHA's (step 3 skipped), as for ``asha``, which is this core on one metric
with each trial its own configuration.

Assumptions: a metric's seed noise at a rung is about the same for every configuration
(pooled), and roughly normal (the t distribution); nothing about how the metrics' errors depend
on each other (the bound holds for any dependence); the per-epoch metrics at a rung rank
configurations as their final objectives will (ASHA's assumption; a misleading early metric
misleads it too). The probability is per pair of configurations: the rule takes the most
probable dominator and makes no correction for how many configurations it compared against (the
quota bounds how many a rung may stop).

A report whose values are missing or not finite is not recorded (the trial continues; its
next report at or past the rung may be): a failed measurement is not a worst case.

The decision logic is :class:`MoAsha`, plain Python and numpy with no Ray, a member of the
search protocol (:mod:`lipsweep.search.protocol`: ``decide`` / ``report``), so the replay
benchmark drives the same object as a live sweep; the member's factory
(``lipsweep.sweep.schedulers._tune:create_moasha``) wraps it in the family's Ray Tune adapter.
Its state is a JSON-able dict
(:meth:`MoAsha.state`, :meth:`MoAsha.from_state`), saved beside Tune's experiment so that
``--resume`` continues with every rung's records.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Optional, Sequence

import numpy as np

from lipsweep.core.config_base import INT_LIMIT, ConfigError, show
from lipsweep.core.dominance import _dominance, crowding_distance, non_dominated_ranks
from lipsweep.search.schedulers.rules import check_reduction_factor

CONTINUE, STOP = "continue", "stop"
SEED_KEY = "seed"
"""The setting that tells the repeats of one configuration apart (``repeat: {seed: [...]}``)."""
SHOWN_DOMINATORS = 10  # trial ids a stop reason lists; more are counted
SHOWN_MARGINS = 3  # configurations whose margins a noise-aware stop reason spells out


def _finite(val: Any) -> bool:
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        return False
    return abs(val) <= INT_LIMIT if isinstance(val, int) else math.isfinite(val)


@dataclass(frozen=True)
class MoashaSettings:
    """``scheduler: {type: moasha, ...}``: several per-epoch metrics, ranked by dominance."""

    type: ClassVar[str] = "moasha"
    metrics: tuple[str, ...] = ()
    """Per-epoch metric names: the objectives compared at each rung."""
    modes: tuple[str, ...] = ()
    """``max`` or ``min`` per metric, in the same order."""
    grace_period: int = 1
    """Epochs every trial runs before it can be stopped (the first rung), >= 1."""
    reduction_factor: float = 2.0
    """Rung spacing, and 1/reduction_factor of each rung is promoted; >= 2."""
    max_t: Optional[int] = None
    """Epochs of a full trial; unset: every trial's epochs."""
    confidence: float = 0.8
    """How sure a stop must be that a configuration ahead of it dominates it beyond seed noise
    (its probability of dominance), in (0, 1) (module docstring, step 3)."""

    def __post_init__(self) -> None:
        metrics, modes = self.metrics, self.modes
        if isinstance(metrics, str):
            metrics = [metrics]
        if not isinstance(metrics, (list, tuple)) or not metrics:
            raise ConfigError(
                "scheduler.metrics", f"must be a list of metric names, got {show(metrics)}"
            )
        if not all(isinstance(m, str) and m for m in metrics):
            raise ConfigError("scheduler.metrics", f"must be metric names, got {show(metrics)}")
        if len(set(metrics)) != len(metrics):
            raise ConfigError("scheduler.metrics", f"names a metric twice: {show(metrics)}")
        if isinstance(modes, str):
            modes = [modes]
        if not isinstance(modes, (list, tuple)) or len(modes) != len(metrics):
            raise ConfigError(
                "scheduler.modes",
                f"needs one mode per metric ({len(metrics)}: {list(metrics)}), got {show(modes)}",
            )
        bad = [m for m in modes if m not in ("max", "min")]
        if bad:
            raise ConfigError("scheduler.modes", f"each must be max or min, got {show(bad[0])}")
        object.__setattr__(self, "metrics", tuple(metrics))
        object.__setattr__(self, "modes", tuple(modes))
        g = self.grace_period
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= INT_LIMIT:
            raise ConfigError("scheduler.grace_period", f"must be an integer >= 1, got {show(g)}")
        check_reduction_factor(self.reduction_factor, "scheduler.reduction_factor")
        c = self.confidence
        if not _finite(c) or not 0 < c < 1:
            raise ConfigError("scheduler.confidence", f"must be a number in (0, 1), got {show(c)}")
        t = self.max_t
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t > INT_LIMIT):
            raise ConfigError("scheduler.max_t", f"must be a positive integer, got {show(t)}")
        if t is not None and t < g:
            raise ConfigError("scheduler.max_t", f"must be >= grace_period ({g}), got {show(t)}")

    def metrics_used(self) -> tuple[tuple[str, str], ...]:
        """(field, metric) pairs the space checks are reported every epoch."""
        return tuple(("scheduler.metrics", m) for m in self.metrics)

    def check_epochs(self, epochs: int) -> None:
        """ConfigError unless the rungs fit trials of ``epochs`` epochs (:func:`check_rungs`)."""
        check_rungs(self.grace_period, self.max_t, epochs)


def check_rungs(grace_period: float, max_t: Optional[int], epochs: int) -> None:
    """A scheduler over trials of ``epochs`` epochs must have its first rung within them
    (else it could never stop one), and no rung past them (a trial's last epoch would then be
    a rung, where it is stopped before its final report): ConfigError naming the field."""
    if max_t is not None and max_t > epochs:
        raise ConfigError(
            "scheduler.max_t",
            f"must be at most the trials' {epochs} epochs, got {max_t}: a rung at or past a "
            "trial's last epoch would stop it before its final report",
        )
    top = max_t or epochs
    if grace_period > top:
        what = "max_t" if max_t is not None else "the trials' epochs"
        raise ConfigError(
            "scheduler.grace_period",
            f"must be at most {what} ({top}), got {show(grace_period)}: the scheduler would "
            "have no rung within a trial and could never stop one",
        )


def group_key(flat: Mapping[str, Any]) -> str:
    """The configuration a trial's flat config belongs to: the config without ``seed``."""
    rest = {str(k): v for k, v in flat.items() if k != SEED_KEY}
    return json.dumps(rest, sort_keys=True, default=str)


@dataclass(frozen=True)
class StopReason:
    """Why a configuration stopped: where, what was ahead of it, by how much, against what
    noise."""

    epoch: float
    """The rung (epochs trained) at which it was judged."""
    dominated_by: tuple[str, ...]
    """A trial of each configuration that dominates it at the rung (beyond noise, where the
    sweep estimates noise), the largest margin first."""
    front: int
    """Its non-dominated front at the rung (1 = not dominated by any configuration there)."""
    ahead: int
    """Configurations ordered strictly ahead of it (front, then crowding distance)."""
    kept: int
    """How many the rung promotes: ceil(n / reduction_factor)."""
    of: int
    """Configurations recorded at the rung, itself included."""
    seeds: int = 1
    """Its seeds that had reported at the rung."""
    metrics: tuple[str, ...] = ()
    margins: tuple[tuple[float, ...], ...] = ()
    """Per dominating configuration (as ``dominated_by``), how far ahead it was per metric
    (in the metric's better direction: positive)."""
    noise: tuple[float, ...] = ()
    """Seed noise per metric (pooled standard deviation) at the rung; empty: not estimated."""
    noise_seeds: int = 0
    """Seeds at the rung the noise was estimated from."""
    noise_df: int = 0
    """Its degrees of freedom (seeds minus configurations with repeats)."""
    confidence: float = 0.0
    probabilities: tuple[float, ...] = ()
    """Per dominating configuration (as ``dominated_by``), a lower bound on the probability
    that it is ahead in every metric (module docstring, step 3); empty: not estimated."""

    def text(self) -> str:
        """One line for the ``lipsweep.stopped_by`` tag and the log."""
        head = f"rung at epoch {self.epoch:g}: "
        tail = f" ({self.ahead} ahead; {self.kept} of {self.of} promoted)"
        if not self.noise:
            if self.dominated_by:
                ids = list(self.dominated_by[:SHOWN_DOMINATORS])
                more = len(self.dominated_by) - len(ids)
                shown = ", ".join(ids) + (f" and {more} more" if more > 0 else "")
                return f"{head}dominated by {shown}{tail}"
            return f"{head}front {self.front}, crowded out{tail}"
        parts = []
        probs = self.probabilities or (None,) * len(self.margins)
        for tid, margin, p in list(zip(self.dominated_by, self.margins, probs))[:SHOWN_MARGINS]:
            by = ", ".join(f"{m} {v:+.4g}" for m, v in zip(self.metrics, margin))
            sure = "" if p is None else f"; P(dominates) >= {p:.2f}"
            parts.append(f"{tid} ({by}{sure})")
        more = len(self.dominated_by) - len(parts)
        shown = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
        noise = ", ".join(f"{m} {v:.4g}" for m, v in zip(self.metrics, self.noise))
        return (
            f"{head}{self.seeds} seed{'s' if self.seeds != 1 else ''} behind, beyond seed "
            f"noise at {self.confidence:.0%} confidence, {shown}; seed noise (sd) {noise} from "
            f"{self.noise_seeds} seeds (df {self.noise_df}){tail}"
        )


def t_cdf(x: np.ndarray, df: float) -> np.ndarray:
    """Student's t distribution function (scipy) at ``x`` with ``df`` degrees of freedom."""
    from scipy.stats import t as student_t

    return np.asarray(student_t.cdf(x, df), dtype=float)


def dominance_probability(
    gaps: np.ndarray, sd: np.ndarray, df: float, n_ahead: np.ndarray, n_me: float
) -> np.ndarray:
    """A lower bound on the probability that each configuration is ahead of one in every
    metric (module docstring, step 3): ``1 - sum_j (1 - T_df(gap_j / (s_j * sqrt(1/n_h +
    1/n_g))))``, at least 0 (Boole's inequality: valid whatever the dependence between the
    metrics). ``gaps`` (k, m): how far each of k configurations is ahead, per metric (its
    better direction positive); ``sd`` (m,): seed noise; ``n_ahead`` (k,): their seeds;
    ``n_me``: the judged configuration's seeds. Infinite noise (no repeats yet): 0."""
    se = np.asarray(sd, dtype=float) * np.sqrt(1 / np.asarray(n_ahead, float)[:, None] + 1 / n_me)
    if not np.all(np.isfinite(se)) or df <= 0:
        return np.zeros(len(gaps))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, gaps / se, np.where(gaps > 0, np.inf, -np.inf))
    return np.maximum(0.0, 1.0 - np.sum(1.0 - t_cdf(z, df), axis=1))


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
        confidence: Optional[float] = 0.8,
        seeds: int = 1,
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
        self.group_of: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.ended: set[str] = set()
        self.reported: dict[str, dict[int, list[float]]] = {}  # trial -> rung -> values
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
            s.confidence, seeds,
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
            if rung is not None and all(_finite(v) for v in values):
                self.reported[trial][rung] = [float(v) for v in values]
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
        m = len(self.metrics)
        means, counts, ss = (
            np.zeros((len(names), m)),
            np.zeros(len(names)),
            np.zeros((len(names), m)),
        )
        for k, g in enumerate(names):
            x = np.asarray(seen[g])
            means[k], counts[k] = x.mean(axis=0), len(x)
            ss[k] = ((x - means[k]) ** 2).sum(axis=0)
        return names, means, counts, ss

    def noise(
        self, means: np.ndarray, counts: np.ndarray, ss: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """Seed noise per metric (a pooled standard deviation, (m,)) and its degrees of
        freedom, from a rung's table (:meth:`rung_table`; module docstring, step 4): infinite
        at 0 degrees of freedom (no configuration has two seeds at the rung yet)."""
        df = float(np.sum(counts - 1))
        if df <= 0:
            return np.full(means.shape[1], np.inf), 0.0
        return np.sqrt(ss.sum(axis=0) / df), df

    def rounding_noise(self, i: int) -> np.ndarray:
        """Per metric, the standard deviation that rounding alone puts into rung ``i``'s values
        (module docstring, step 4): ``step / sqrt(12)``, the spread of a uniform error over one
        step (Sheppard 1898), with ``step`` the finest gap between two distinct recorded
        values; 0 where fewer than two distinct values were recorded."""
        values = np.array([r[i] for r in self.reported.values() if i in r], dtype=float)
        out = np.zeros(len(self.metrics))
        for j in range(len(self.metrics)):
            distinct = np.unique(values[:, j]) if len(values) else values
            if len(distinct) > 1:
                out[j] = float(np.min(np.diff(distinct))) / math.sqrt(12.0)
        return out

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
        if ahead < kept:
            return None
        sign = np.where(np.asarray(self.modes) == "max", 1.0, -1.0)
        gaps = (means - means[me]) * sign  # (n, m): how far each is ahead of me, per metric
        base = dict(
            epoch=self.rungs[i], front=int(ranks[me]), ahead=ahead, kept=kept, of=n,
            seeds=int(counts[me]), metrics=self.metrics,
        )  # fmt: skip
        if self.confidence is None or not self.repeats:  # MO-ASHA's quota alone
            dom = _dominance(means * sign)[:, me]  # (n,): row g dominates me
            by = tuple(self.members[g][0] for g, d in zip(names, dom) if d)
            return StopReason(dominated_by=by, **base)
        sd, df = self.noise(means, counts, ss)
        sd = np.maximum(sd, self.rounding_noise(i))
        prob = dominance_probability(gaps, sd, df, counts, counts[me])  # (n,)
        prob[me] = 0.0
        beyond = np.flatnonzero(prob >= self.confidence)
        if not len(beyond):
            return None
        beyond = beyond[np.argsort(-prob[beyond], kind="stable")]
        return StopReason(
            dominated_by=tuple(self.members[names[k]][0] for k in beyond),
            margins=tuple(tuple(float(v) for v in gaps[k]) for k in beyond),
            noise=tuple(float(v) for v in sd),
            noise_seeds=int(counts.sum()),
            noise_df=int(round(df)),
            confidence=float(self.confidence),
            probabilities=tuple(float(prob[k]) for k in beyond),
            **base,
        )

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything decided and recorded so far, JSON-able (:meth:`from_state`)."""
        return {
            "version": 2,
            "metrics": list(self.metrics),
            "modes": list(self.modes),
            "reduction_factor": self.reduction_factor,
            "max_t": self.max_t,
            "rungs": list(self.rungs),
            "expected": self.expected,
            "seeds": self.seeds,
            "confidence": self.confidence,
            "members": self.members,
            "ended": sorted(self.ended),
            "reported": {t: {str(i): v for i, v in r.items()} for t, r in self.reported.items()},
            "stopped": {g: _reason_state(r) for g, r in self.stopped.items()},
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
        )
        core.rungs = tuple(float(r) for r in state["rungs"])
        core.members = {g: list(ts) for g, ts in state["members"].items()}
        core.group_of = {t: g for g, ts in core.members.items() for t in ts}
        core.ended = set(state["ended"])
        core.reported = {
            t: {int(i): list(v) for i, v in r.items()} for t, r in state["reported"].items()
        }
        core.stopped = {g: _reason_from(r) for g, r in state["stopped"].items()}
        core.told_stop = set(state["told_stop"])
        return core


def _reason_state(r: StopReason) -> dict[str, Any]:
    return {k: (list(map(list, v)) if k == "margins" else list(v)) if isinstance(v, tuple) else v
            for k, v in vars(r).items()}  # fmt: skip


def _reason_from(d: Mapping[str, Any]) -> StopReason:
    fields_ = {k: v for k, v in d.items()}
    for k in ("dominated_by", "metrics", "noise", "probabilities"):
        fields_[k] = tuple(fields_.get(k, ()))
    fields_["margins"] = tuple(tuple(m) for m in fields_.get("margins", ()))
    return StopReason(**fields_)


def expected_seeds(trials: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many trials (seeds) each configuration of a space's expanded trials has."""
    out: dict[str, int] = {}
    for flat in trials:
        key = group_key(flat)
        out[key] = out.get(key, 0) + 1
    return out
