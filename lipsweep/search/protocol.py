"""The search protocol: one interface for every searcher and scheduler, driven alike by the
live sweep (Ray Tune) and the replay benchmark (:mod:`lipsweep.search.replay`).

A member implements, once:

- ``suggest(trial_id) -> config | None``: a searcher's next configuration (flat settings) for
  trial ``trial_id``; None when it has nothing (more) to propose;
- ``report(trial_id, result)``: trial ``trial_id`` ended, with its final result (None when it
  was stopped or failed); a searcher learns from it, a scheduler forgets to wait for it;
- ``decide(trial_id, group, t, metrics) -> "continue" | "stop"``: a scheduler's verdict on a
  trial's report at ``t`` epochs (``group``: the configuration whose seeds it judges together;
  ``t`` = 0 asks whether a trial may start).

Schedulers are plain cores (:class:`lipsweep.search.schedulers.moasha.MoAsha`), built by the
family's factories (:class:`lipsweep.search.schedulers.cores.Decider`) and wrapped for Tune
by :class:`lipsweep.sweep.schedulers._tune.CoreScheduler`. A searcher's registered factory
builds a Tune ``Searcher`` (or, for ``grid`` and ``random``, the list of trials it runs);
:class:`TuneSearcherMember` and :class:`ListMember` give either the protocol, so the replay
drives the very object a live sweep would. A searcher may name a Ray-free member instead
(``SearcherInfo.member``: the Optuna searchers',
:class:`lipsweep.search.searchers.optuna_member.OptunaMember`, telling the study what Tune's
``OptunaSearch`` tells it), which the replay drives without Ray. :class:`Repeats` runs each
suggested configuration once per seed and tells the searcher the configuration's seed-mean
result once every seed has ended: the same code under the live sweep
(:class:`lipsweep.sweep.searchers._optuna.RepeatSearcher`) and the replay.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

CONTINUE, STOP = "continue", "stop"
SEED_KEY = "seed"

_log = logging.getLogger(__name__)


class Member(Protocol):
    """What a searcher or scheduler implements (module docstring)."""

    def suggest(self, trial_id: str) -> Optional[dict[str, Any]]: ...

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]]) -> None: ...

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str: ...


def _inner(config: Any) -> Optional[dict[str, Any]]:
    """A Tune searcher's suggestion as a flat config (grid sweeps nest it under ``trial``)."""
    if not isinstance(config, dict):
        return None  # None (not ready) or Searcher.FINISHED
    inner = config.get("trial")
    return dict(inner) if isinstance(inner, Mapping) else dict(config)


class TuneSearcherMember:
    """A Tune ``Searcher`` (a registered searcher's ``TunePlan.search_alg``) as a member."""

    def __init__(self, searcher: Any) -> None:
        self.searcher = searcher

    def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
        return _inner(self.searcher.suggest(trial_id))

    def report(
        self, trial_id: str, result: Optional[Mapping[str, Any]], failed: bool = False
    ) -> None:
        self.searcher.on_trial_complete(trial_id, dict(result) if result else None, error=failed)

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return CONTINUE


class ListMember:
    """A searcher whose trials are a list drawn up front (``grid``, ``random``) as a member."""

    def __init__(self, trials: Iterable[Mapping[str, Any]]) -> None:
        self.left = [dict(t) for t in trials]

    def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
        return self.left.pop(0) if self.left else None

    def report(
        self, trial_id: str, result: Optional[Mapping[str, Any]], failed: bool = False
    ) -> None:
        pass

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return CONTINUE


def seed_mean(results: Sequence[Optional[Mapping[str, Any]]], names: Sequence[str]):
    """The mean of ``names`` over the results that hold all of them as finite numbers, or
    None when none does."""
    full = [
        r
        for r in results
        if r is not None
        and all(isinstance(r.get(n), (int, float)) and math.isfinite(r[n]) for n in names)
    ]
    if not full:
        return None
    return {n: sum(float(r[n]) for r in full) / len(full) for n in names}


class Repeats:
    """Each configuration a searcher member suggests, once per seed, judged as one.

    :meth:`suggest` asks the member for a configuration on the first seed's trial id (its
    *lead*) and hands out its other seeds to the next trial ids before asking again;
    :meth:`report` tells the member the seed-mean of ``names`` (the objectives) over the seeds
    that finished, on the lead's id, once every seed has ended (None: all stopped or failed).
    """

    def __init__(self, member: Any, seeds: Sequence[Any], names: Sequence[str]) -> None:
        self.member = member
        self.seeds = list(seeds)
        self.names = list(names)
        self.queue: list[tuple[str, dict[str, Any], Any]] = []
        self.lead_of: dict[str, str] = {}
        self.waiting: dict[str, int] = {}  # lead -> seeds not ended yet
        self.results: dict[str, list[Optional[Mapping[str, Any]]]] = {}
        self.failed: dict[str, int] = {}
        self.exhausted = False

    def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
        if not self.queue and not self.exhausted:
            config = self.member.suggest(trial_id)
            if config is None:
                self.exhausted = True
            else:
                config = {k: v for k, v in config.items() if k != SEED_KEY}
                self.waiting[trial_id] = len(self.seeds)
                self.queue = [(trial_id, config, s) for s in self.seeds]
        if not self.queue:
            return None
        lead, config, seed = self.queue.pop(0)
        self.lead_of[trial_id] = lead
        return {**config, SEED_KEY: seed}

    def state(self) -> dict[str, Any]:
        """The bookkeeping as plain JSON values (results cut to the objectives ``names``)."""
        kept = {
            lead: [None if r is None else {k: r[k] for k in self.names if k in r} for r in rs]
            for lead, rs in self.results.items()
        }
        return {
            "queue": [list(item) for item in self.queue],
            "lead_of": dict(self.lead_of),
            "waiting": dict(self.waiting),
            "results": kept,
            "failed": dict(self.failed),
            "exhausted": self.exhausted,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`state` wrote."""
        self.queue = [(lead, dict(config), seed) for lead, config, seed in state["queue"]]
        self.lead_of = dict(state["lead_of"])
        self.waiting = {k: int(v) for k, v in state["waiting"].items()}
        self.results = {k: list(v) for k, v in state["results"].items()}
        self.failed = {k: int(v) for k, v in state["failed"].items()}
        self.exhausted = bool(state["exhausted"])

    def lead(self, trial_id: str) -> Optional[str]:
        """The lead trial of ``trial_id``'s configuration (itself for the first seed)."""
        return self.lead_of.get(trial_id)

    def report(
        self, trial_id: str, result: Optional[Mapping[str, Any]], failed: bool = False
    ) -> None:
        lead = self.lead_of.get(trial_id)
        if lead is None or lead not in self.waiting:
            return
        self.results.setdefault(lead, []).append(result)
        self.failed[lead] = self.failed.get(lead, 0) + bool(failed)
        self.waiting[lead] -= 1
        if self.waiting[lead] > 0:
            return
        del self.waiting[lead]
        mean = seed_mean(self.results.pop(lead), self.names)
        all_failed = self.failed.pop(lead) == len(self.seeds)
        self.member.report(lead, mean, failed=mean is None and all_failed)
