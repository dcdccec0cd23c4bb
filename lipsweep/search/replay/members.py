"""The registered members on a table: the orders a grid and a random search run, the table as a
``search.space``, a searcher restricted to the table (:class:`TableMember`), and the rules
that stop trials (:class:`NoStop`, :class:`CoreRule`, Syne Tune's MO-ASHA as a peer)."""

from __future__ import annotations

import datetime
import functools
import random as _random
from typing import Any, Mapping, Optional, Sequence

from lipsweep.search.protocol import CONTINUE, STOP
from lipsweep.search.replay.table import Config, Table


def grid_order(table: Table, seed: int) -> list[Config]:
    """The whole grid, in a random order (``random.Random(seed)``)."""
    order = list(table.configs)
    _random.Random(seed).shuffle(order)
    return order


def _values(configs: Sequence[Config], param: str) -> list[str]:
    return sorted({c.params[param] for c in configs})


def random_draws(table: Table, seed: int, tries: int = 200) -> list[Config]:
    """A random search over the table's space, drawn up front as the ``random`` searcher's
    trials are: each setting uniform over the values the table has for the settings drawn
    before it (a regularizer's own settings among that regularizer's values, as in a
    conditional space); a configuration already drawn is drawn again, up to ``tries`` times."""
    rng, seen, out = _random.Random(seed), set(), []
    while True:
        for _ in range(tries):
            left: Sequence[Config] = table.configs
            for p in table.params:
                value = rng.choice(_values(left, p))
                left = [c for c in left if c.params[p] == value]
            if left[0].key not in seen:
                seen.add(left[0].key)
                out.append(left[0])
                break
        else:
            return out


def table_space(table: Table) -> Any:
    """The table's settings as a ``search.space``
    (:class:`lipsweep.search.space_distributions.SearchSpace`): each setting a choice of the
    values the table has; with a ``regularizer`` setting, the others are that regularizer's
    branch (drawn among its values once it is drawn)."""
    from lipsweep.search.space_distributions import Distribution, SearchSpace

    def choice(configs: Sequence[Config], p: str) -> Any:
        return Distribution("choice", tuple(_values(configs, p)))

    if "regularizer" not in table.params:
        return SearchSpace({p: choice(table.configs, p) for p in table.params}, {})
    rest = [p for p in table.params if p != "regularizer"]
    branches = {}
    for reg in _values(table.configs, "regularizer"):
        under = [c for c in table.configs if c.params["regularizer"] == reg]
        branches[reg] = {p: choice(under, p) for p in rest}
    return SearchSpace({"regularizer": choice(table.configs, "regularizer")}, branches)


class TableMember:
    """A searcher member restricted to the table: a draw the table lacks is told as failed
    and drawn again; a configuration already run is told its result again (no compute), one
    running is told when it ends. None after ``limit`` draws without a new configuration,
    or once every configuration has run or is running."""

    def __init__(self, member: Any, table: Table, limit: Optional[int] = None) -> None:
        self.member, self.table = member, table
        self.by_params = {tuple(c.params[p] for p in table.params): c for c in table.configs}
        self.limit = limit or 20 * len(table.configs)
        self.done: dict[str, tuple[Optional[Mapping[str, float]], bool]] = {}
        self.pending: dict[str, list[str]] = {}
        self.key_of: dict[str, tuple[str, str]] = {}  # trial -> (config key, member's id)

    def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
        for k in range(self.limit):
            if len(self.done) + len(self.pending) == len(self.by_params):
                return None
            sub = trial_id if k == 0 else f"{trial_id}~{k}"
            flat = self.member.suggest(sub)
            if flat is None:
                return None
            config = self.by_params.get(tuple(str(flat.get(p, "")) for p in self.table.params))
            if config is None:
                self.member.report(sub, None, failed=True)
            elif config.key in self.done:
                self.member.report(sub, *self.done[config.key])
            elif config.key in self.pending:
                self.pending[config.key].append(sub)
            else:
                self.pending[config.key] = []
                self.key_of[trial_id] = (config.key, sub)
                return dict(config.params)
        return None

    def report(
        self, trial_id: str, result: Optional[Mapping[str, Any]], failed: bool = False
    ) -> None:
        key, sub = self.key_of.pop(trial_id)
        self.done[key] = (result, failed)
        self.member.report(sub, result, failed)
        for sub in self.pending.pop(key, []):
            self.member.report(sub, result, failed)


class NoStop:
    """No scheduler: every trial runs its full budget."""

    def group(self, trial_id: str, flat: Mapping[str, Any]) -> str:
        return trial_id

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return CONTINUE

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]] = None) -> None:
        pass


class CoreRule(NoStop):
    """A scheduler member's core, driven as the Tune adapter drives it (its grouping
    included): ``adapter`` is what the registered scheduler's ``create`` built (a
    :class:`~lipsweep.search.schedulers.cores.Decider`, or a plugin's scheduler carrying
    ``core`` and ``group``)."""

    def __init__(self, adapter: Any) -> None:
        self.adapter, self.core = adapter, adapter.core

    def group(self, trial_id: str, flat: Mapping[str, Any]) -> str:
        return self.adapter.group(trial_id, flat)

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return self.core.decide(trial_id, group, t, metrics)

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]] = None) -> None:
        self.core.report(trial_id)


SYNE_MOASHA = "syne-moasha"
"""The peer method that exists only where Syne Tune imports (:func:`syne_tune_missing`)."""
SYNE_INSTALL = (
    "the bench extra (syne-tune==0.16.0): `uv sync --frozen --extra dev --extra bench` in a "
    "clone, `pip install '.[bench]'` elsewhere"
)


@functools.cache
def syne_tune_missing() -> Optional[str]:
    """Why Syne Tune's MO-ASHA cannot be imported here (the import error), or None."""
    try:
        import syne_tune.optimizer.schedulers.multiobjective.moasha  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


class SyneMoashaRule(NoStop):
    """Syne Tune's MO-ASHA (``syne_tune.optimizer.schedulers.multiobjective.moasha.MOASHA``,
    Schmucker et al. 2021, arXiv 2106.12639) deciding, as Syne Tune 0.16's ``Tuner`` drives a
    scheduler (``syne_tune/tuner.py``): ``on_trial_add`` when a trial starts,
    ``on_trial_result`` at each epoch, ``on_trial_remove`` once it says STOP (it says STOP at
    ``max_t`` too). Its defaults otherwise: one bracket, non-dominated sorting with its
    epsilon-net tie-break. Per trial, as Syne Tune judges trials (not seed-aware). It
    minimises every metric, so ``max`` metrics are negated. A peer from outside lipsweep,
    not a registered member."""

    TIME = "epoch"
    CREATED = datetime.datetime(2000, 1, 1)  # a Trial needs one; no decision reads it

    def __init__(
        self,
        metrics: Sequence[str],
        modes: Sequence[str],
        max_t: int,
        grace_period: int,
        reduction_factor: float,
        seed: int,
    ) -> None:
        from syne_tune.backend.trial_status import Trial
        from syne_tune.optimizer.scheduler import SchedulerDecision
        from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

        self.core = MOASHA(
            config_space={}, metrics=list(metrics), do_minimize=True, time_attr=self.TIME,
            max_t=max_t, grace_period=grace_period, reduction_factor=reduction_factor,
            random_seed=seed,
        )  # fmt: skip
        self.signs = {m: 1.0 if mode == "min" else -1.0 for m, mode in zip(metrics, modes)}
        self.make_trial, self.go = Trial, SchedulerDecision.CONTINUE
        self.trials: dict[str, Any] = {}  # our trial -> Syne Tune's Trial
        self.removed: set[str] = set()

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        if t == 0:  # the trial starts
            self.trials[trial_id] = self.make_trial(len(self.trials), {}, self.CREATED)
            self.core.on_trial_add(self.trials[trial_id])
            return CONTINUE
        result = {self.TIME: t} | {m: s * metrics[m] for m, s in self.signs.items()}
        go = self.core.on_trial_result(self.trials[trial_id], result) == self.go
        if not go:
            self.core.on_trial_remove(self.trials[trial_id])
            self.removed.add(trial_id)
        return CONTINUE if go else STOP

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]] = None) -> None:
        if trial_id in self.trials and trial_id not in self.removed:
            self.core.on_trial_remove(self.trials[trial_id])
            self.removed.add(trial_id)
