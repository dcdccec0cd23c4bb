"""``moasha``: multi-objective asynchronous successive halving, seed-aware.

Spelled ``scheduler: {type: moasha, metrics: [probe_acc_pgd_4, probe_lip_jacobian_median,
acc_clean], modes: [max, min, max], grace_period: 1, reduction_factor: 2, max_t: 40}``.

ASHA (Li et al., MLSys 2020) with the promotion rule of MO-ASHA (Schmucker et al. 2021,
arXiv 2106.12639): rungs at ``grace_period * reduction_factor**k`` epochs below ``max_t``. When a
configuration reaches a rung, the configurations recorded there (itself included, ``n`` of
them) are ordered as NSGA-II orders a population (Deb et al. 2002): by non-dominated front,
then, inside a front, by crowding distance (larger first). It is promoted (continues) when
fewer than ``ceil(n / reduction_factor)`` configurations are strictly ahead of it, else it
stops. The first configuration at a rung always continues, as in ASHA.

Tie-break: crowding distance, not the epsilon-net that Schmucker et al. found slightly better
on some of their benchmarks, because it is deterministic (the greedy epsilon-net needs a first
point, drawn at random or by a convention), needs no setting, is invariant to each
objective's scale (gaps are divided by the objective's range), and its decision can be
stated in a stop reason ("front 1, crowded out").

Seeds: trials whose flat configs differ only in ``seed`` (:func:`group_key`, as
``lipsweep.decide.arms.arm_key`` groups them) are one configuration. It is judged at a rung
on the mean of its seeds' values once every seed has reached that rung (or ended without
reaching it); a seed that arrives first keeps training meanwhile (nothing waits or pauses,
so a slow or queued seed never blocks a worker). The configuration is promoted or stopped
as a whole: seeds still running are stopped at their next report, seeds not started yet at
their first. How many seeds a configuration has is known up front from the space's
``repeat: {seed: [...]}``; a configuration the space does not list (Optuna draws) counts the
seeds it has seen.

A report whose values are missing or not finite is not recorded (the trial continues; its
next report at or past the rung may be): a failed measurement is not a worst case.

The decision logic is :class:`MoAsha`, plain Python and numpy with no Ray, so the replay
benchmark drives the same code as a live sweep; :func:`create` wraps it in the family's Ray
Tune adapter (:mod:`lipsweep.sweep.schedulers._tune`). Its state is a JSON-able dict
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

CONTINUE, STOP = "continue", "stop"
SEED_KEY = "seed"
"""The setting that tells the repeats of one configuration apart (``repeat: {seed: [...]}``)."""
SHOWN_DOMINATORS = 10  # trial ids a stop reason lists; more are counted


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
    """Epochs of a full trial; unset: the space's ``fixed.epochs`` (default 40)."""

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
        rf = self.reduction_factor
        if not _finite(rf) or rf < 2:
            raise ConfigError(
                "scheduler.reduction_factor", f"must be a number >= 2, got {show(rf)}"
            )
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
    """Why a configuration stopped: where, and what was ahead of it."""

    epoch: float
    """The rung (epochs trained) at which it was judged."""
    dominated_by: tuple[str, ...]
    """Trials (of configurations recorded at that rung) that dominate its values."""
    front: int
    """Its non-dominated front at the rung (1 = not dominated by any configuration there)."""
    ahead: int
    """Configurations ordered strictly ahead of it (front, then crowding distance)."""
    kept: int
    """How many the rung promotes: ceil(n / reduction_factor)."""
    of: int
    """Configurations recorded at the rung, itself included."""

    def text(self) -> str:
        """One line for the ``lipsweep.stopped_by`` tag and the log."""
        head = f"rung at epoch {self.epoch:g}: "
        if self.dominated_by:
            ids = list(self.dominated_by[:SHOWN_DOMINATORS])
            more = len(self.dominated_by) - len(ids)
            shown = ", ".join(ids) + (f" and {more} more" if more > 0 else "")
            head += f"dominated by {shown}"
        else:
            head += f"front {self.front}, crowded out"
        return f"{head} ({self.ahead} ahead; {self.kept} of {self.of} promoted)"


class MoAsha:
    """The decision logic of ``moasha`` (module docstring), with no Ray.

    Drive it with :meth:`on_result` for each per-epoch report, in the order they arrive, and
    :meth:`on_complete` when a trial ends (finished, stopped or failed). ``expected`` gives a
    configuration's number of seeds, by :func:`group_key`; unlisted ones count what they show.
    """

    def __init__(
        self,
        metrics: Sequence[str],
        modes: Sequence[str],
        grace_period: int,
        reduction_factor: float,
        max_t: int,
        expected: Optional[Mapping[str, int]] = None,
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
        self.group_of: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.ended: set[str] = set()
        self.reported: dict[str, dict[int, list[float]]] = {}  # trial -> rung -> values
        self.recorded: list[dict[str, list[float]]] = [{} for _ in self.rungs]  # group means
        self.judged_by: dict[str, dict[int, list[str]]] = {}  # group -> rung -> its trials
        self.stopped: dict[str, StopReason] = {}  # group -> why
        self.told_stop: set[str] = set()
        self.changes = 0
        """Counts changes of :meth:`state` (an adapter saves the state when it moved)."""

    @classmethod
    def from_settings(
        cls, s: MoashaSettings, max_t: int, expected: Optional[Mapping[str, int]] = None
    ) -> "MoAsha":
        return cls(s.metrics, s.modes, s.grace_period, s.reduction_factor, max_t, expected)

    # -- events --------------------------------------------------------------------------
    def add(self, trial: str, group: str) -> None:
        """Register ``trial`` as a seed of configuration ``group`` (also done by on_result)."""
        if trial in self.group_of:
            return
        self.group_of[trial] = group
        self.members.setdefault(group, []).append(trial)
        self.reported[trial] = {}
        self.changes += 1

    def on_result(self, trial: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        """``"continue"`` or ``"stop"`` for ``trial`` after its report at ``t`` epochs."""
        self.add(trial, group)
        if trial in self.ended:  # it reports again: retried after a worker failure
            self.ended.discard(trial)
            self.changes += 1
        group = self.group_of[trial]
        if group not in self.stopped and t < self.max_t:
            rung = self._rung(trial, t)
            values = [metrics.get(m) for m in self.metrics]
            if rung is not None and all(_finite(v) for v in values):
                self.reported[trial][rung] = [float(v) for v in values]
                self.changes += 1
                self._judge_ready(group)
        if group in self.stopped:
            self.changes += trial not in self.told_stop
            self.told_stop.add(trial)
            return STOP
        return CONTINUE

    def on_complete(self, trial: str) -> None:
        """``trial`` ended (or failed: Tune reports a failure it will retry the same way, and a
        retried trial that reports again is waited for again); its configuration no longer
        waits for it at the rungs it has not reached."""
        if trial in self.group_of and trial not in self.ended:
            self.ended.add(trial)
            self.changes += 1
            self._judge_ready(self.group_of[trial])

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

    def _passed(self, trial: str, i: int) -> bool:
        """Whether ``trial`` reported at rung ``i`` or a later one (a report without the
        metrics, e.g. between probes, skips a rung)."""
        return any(j >= i for j in self.reported[trial])

    def _judge_ready(self, group: str) -> None:
        """Judge ``group`` at each rung where every seed has reported or ended."""
        if group in self.stopped:
            return
        members = self.members[group]
        done = self.judged_by.setdefault(group, {})
        for i in range(len(self.rungs)):
            if i in done:
                continue
            at = [m for m in members if i in self.reported[m]]
            waiting = [m for m in members if not self._passed(m, i) and m not in self.ended]
            unseen = self.expected.get(group, 1) - len(members)
            if not at or waiting or unseen > 0:
                continue
            done[i] = at
            mean = np.mean([self.reported[m][i] for m in at], axis=0)  # (n_metrics,)
            self.recorded[i][group] = [float(x) for x in mean]
            reason = self._decide(i, group)
            if reason is not None:
                self.stopped[group] = reason
                return

    def _decide(self, i: int, group: str) -> Optional[StopReason]:
        """None (promote) or why ``group`` stops at rung ``i`` (module docstring)."""
        names = list(self.recorded[i])
        values = np.array([self.recorded[i][g] for g in names])  # (n, m)
        n = len(names)
        kept = math.ceil(n / self.reduction_factor)
        ranks = non_dominated_ranks(values, self.modes)  # (n,)
        crowd = np.zeros(n)
        for r in np.unique(ranks):
            front = np.flatnonzero(ranks == r)
            crowd[front] = crowding_distance(values[front])
        me = names.index(group)
        ahead = int(np.sum((ranks < ranks[me]) | ((ranks == ranks[me]) & (crowd > crowd[me]))))
        if ahead < kept:
            return None
        sign = np.where(np.asarray(self.modes) == "max", 1.0, -1.0)
        dom = _dominance(values * sign)[:, me]  # (n,): row g dominates me
        by = [t for g, d in zip(names, dom) if d for t in self.judged_by[g][i]]
        return StopReason(self.rungs[i], tuple(by), int(ranks[me]), ahead, kept, n)

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything decided and recorded so far, JSON-able (:meth:`from_state`)."""
        return {
            "version": 1,
            "metrics": list(self.metrics),
            "modes": list(self.modes),
            "reduction_factor": self.reduction_factor,
            "max_t": self.max_t,
            "rungs": list(self.rungs),
            "expected": self.expected,
            "members": self.members,
            "ended": sorted(self.ended),
            "reported": {t: {str(i): v for i, v in r.items()} for t, r in self.reported.items()},
            "recorded": self.recorded,
            "judged_by": {g: {str(i): v for i, v in r.items()} for g, r in self.judged_by.items()},
            "stopped": {g: {**vars(r), "dominated_by": list(r.dominated_by)}
                        for g, r in self.stopped.items()},
            "told_stop": sorted(self.told_stop),
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "MoAsha":
        """The core as :meth:`state` saved it."""
        rungs = state["rungs"]
        core = cls(
            state["metrics"],
            state["modes"],
            1,
            state["reduction_factor"],
            state["max_t"],
            state["expected"],
        )
        core.rungs = tuple(float(r) for r in rungs)
        core.members = {g: list(ts) for g, ts in state["members"].items()}
        core.group_of = {t: g for g, ts in core.members.items() for t in ts}
        core.ended = set(state["ended"])
        core.reported = {
            t: {int(i): list(v) for i, v in r.items()} for t, r in state["reported"].items()
        }
        core.recorded = [dict(r) for r in state["recorded"]]
        core.judged_by = {
            g: {int(i): list(v) for i, v in r.items()} for g, r in state["judged_by"].items()
        }
        core.stopped = {
            g: StopReason(**{**r, "dominated_by": tuple(r["dominated_by"])})
            for g, r in state["stopped"].items()
        }
        core.told_stop = set(state["told_stop"])
        return core


def expected_seeds(trials: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many trials (seeds) each configuration of a space's expanded trials has."""
    out: dict[str, int] = {}
    for flat in trials:
        key = group_key(flat)
        out[key] = out.get(key, 0) + 1
    return out


def create(settings: MoashaSettings, ctx: Any) -> Any:
    """The Ray Tune scheduler around :class:`MoAsha` (``ctx``: :class:`SchedulerContext`)."""
    from lipsweep.sweep.schedulers._tune import CoreScheduler

    core = MoAsha.from_settings(settings, settings.max_t or ctx.epochs, expected_seeds(ctx.trials))
    from lipsweep.sweep.trainable import ERROR_KEY, FINAL_KEY

    return CoreScheduler(
        core,
        group_key,
        state_path=ctx.state_path,
        skip_keys=(FINAL_KEY, ERROR_KEY),
        restore=ctx.resume,
    )
