"""The replayed methods: ``--method`` names (:func:`parse_method`, :data:`ALIASES`), each built
on the table by its registry's factories (:class:`Bench`: a searcher's Ray-free member where
it names one, else the plan a live sweep builds), and the references that know the final
values (:data:`REFERENCES`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from lipsweep.core.config_base import ConfigError
from lipsweep.core.metric_names import ACC_CLEAN
from lipsweep.search.replay.members import (
    SYNE_MOASHA,
    CoreRule,
    NoStop,
    SyneMoashaRule,
    TableMember,
    grid_order,
    random_draws,
    table_space,
)
from lipsweep.search.replay.oracle import informed_order
from lipsweep.search.replay.simulation import Replay, simulate
from lipsweep.search.replay.table import Table, stop_metrics, told_finals
from lipsweep.search.schedulers.moasha_settings import MoashaSettings

ALIASES: dict[str, tuple[str, Optional[str], dict[str, Any]]] = {
    "asha-clean": ("grid", "asha", {"metric": ACC_CLEAN, "mode": "max"}),
    "moasha": ("grid", "moasha", {}),
    "optuna-moasha": ("optuna-tpe", "moasha", {}),
}
"""Short names of searcher + scheduler pairs: ``asha-clean`` is the grid order with ``asha``
on clean accuracy (the option a sweep had before ``moasha``), ``moasha`` the grid order with
``moasha``, ``optuna-moasha`` TPE proposing and ``moasha`` stopping."""
DEFAULT_METHODS = (
    "grid", "random", "optuna-tpe", "optuna-nsga2", "asha-clean", "moasha", "optuna-moasha",
)  # fmt: skip
"""What ``bench-search`` replays without ``--method`` (and ``syne-moasha`` where Syne Tune
imports). Any registered searcher ``NAME`` or ``SEARCHER+SCHEDULER`` pair, plugins included,
can be named instead."""
NSGA_POPULATION = 8
"""``population_size`` the replay gives a searcher that reads it (NSGA-II/III): the tables
hold tens of configurations, and Optuna's default (50) would leave it random throughout."""


@dataclass(frozen=True)
class Method:
    """A replayed method: a registered searcher, and a registered scheduler or none."""

    name: str
    searcher: str
    scheduler: Optional[str] = None
    overrides: Mapping[str, Any] = field(default_factory=dict)


def parse_method(name: str) -> Method:
    """``--method`` -> :class:`Method` (an alias, ``syne-moasha``, a searcher, or
    ``SEARCHER+SCHEDULER``); ConfigError naming ``--method`` for an unknown member."""
    from lipsweep.search.schedulers import list_schedulers
    from lipsweep.search.searchers import list_searchers

    if name in ALIASES:
        searcher, scheduler, overrides = ALIASES[name]
        return Method(name, searcher, scheduler, overrides)
    if name == SYNE_MOASHA:
        return Method(name, "grid", SYNE_MOASHA)
    searcher, _, scheduler = name.partition("+")
    if searcher not in list_searchers():
        raise ConfigError(
            "method", f"unknown searcher {searcher!r} in {name!r}; give a searcher "
            f"{list_searchers()}, SEARCHER+SCHEDULER (schedulers {list_schedulers()}), or one "
            f"of {[*ALIASES, SYNE_MOASHA]}"
        )  # fmt: skip
    if scheduler and scheduler not in list_schedulers():
        raise ConfigError(
            "method", f"unknown scheduler {scheduler!r} in {name!r}; schedulers are "
            f"{list_schedulers()}"
        )  # fmt: skip
    return Method(name, searcher, scheduler or None)


@dataclass(frozen=True)
class Bench:
    """Everything a replay needs besides its seed (checked once, before the first replay)."""

    table: Table
    objectives: tuple[tuple[str, str], ...]
    stops: tuple[tuple[str, str], ...]
    seeds: tuple[str, ...]
    grace_period: int = MoashaSettings.grace_period
    reduction_factor: float = MoashaSettings.reduction_factor
    confidence: float = MoashaSettings.confidence
    workers: int = 4

    def search(self, method: Method, seed: int, table: Optional[Table] = None) -> Any:
        """The registered searcher of ``method`` on the table, each configuration once per
        seed (:class:`Repeats` over a :class:`TableMember`): its Ray-free member where it names
        one (:func:`~lipsweep.search.searchers.create_member`), else its plan's Tune
        ``Searcher`` or list of trials."""
        from lipsweep.search.protocol import ListMember, Repeats, TuneSearcherMember
        from lipsweep.search.searchers import (
            SearchRequest,
            create_member,
            create_searcher,
            searcher_info,
            searcher_settings,
            settings_keys,
        )

        table = table or self.table
        names = [n for n, _ in self.objectives]
        values = {
            "num_samples": len(table.configs), "seed": seed, "metric": names,
            "mode": [d for _, d in self.objectives], "population_size": NSGA_POPULATION,
        }  # fmt: skip
        keys = settings_keys(method.searcher)
        settings = searcher_settings(
            method.searcher, {k: v for k, v in values.items() if k in keys}
        )
        if method.searcher == "grid":
            drawn = grid_order(table, seed)
        elif searcher_info(method.searcher).lazy:
            drawn = []
        else:  # drawn when a space is loaded: here, from the table's values
            drawn = random_draws(table, seed)
        request = SearchRequest(
            space=table_space(table), trials=[dict(c.params) for c in drawn], normalise=False
        )
        member = create_member(method.searcher, settings, request)
        if member is not None:
            return Repeats(TableMember(member, table), self.seeds, names)
        plan = create_searcher(method.searcher, settings, request)
        if plan.search_alg is not None:
            member = TuneSearcherMember(plan.search_alg)
        else:
            try:
                member = ListMember(plan.param_space["trial"]["grid_search"])
            except (KeyError, TypeError):
                raise ConfigError(
                    "method", f"searcher {method.searcher!r} gives neither a Tune Searcher "
                    "nor a list of trials: the replay cannot drive it"
                ) from None  # fmt: skip
        return Repeats(TableMember(member, table), self.seeds, names)

    def rule(self, method: Method, seed: int, table: Optional[Table] = None) -> Any:
        """The registered scheduler of ``method`` (its core, as the Tune adapter drives it;
        no Ray imported for a built-in)."""
        import dataclasses as dc

        from lipsweep.search.schedulers import (
            SCHEDULERS,
            SchedulerContext,
            create_scheduler,
            scheduler_settings,
        )

        table = table or self.table
        stops = self.stops
        if method.scheduler is None:
            return NoStop()
        if method.scheduler == SYNE_MOASHA:
            return SyneMoashaRule(
                [n for n, _ in stops], [d for _, d in stops], table.epochs, self.grace_period,
                self.reduction_factor, seed,
            )  # fmt: skip
        fields_ = {f.name for f in dc.fields(SCHEDULERS.entry(method.scheduler).settings)}
        values = {
            "metrics": [n for n, _ in stops], "modes": [d for _, d in stops],
            "metric": stops[0][0], "mode": stops[0][1], "grace_period": self.grace_period,
            "reduction_factor": self.reduction_factor, "confidence": self.confidence,
            **method.overrides,
        }  # fmt: skip
        settings = scheduler_settings(
            {"type": method.scheduler, **{k: v for k, v in values.items() if k in fields_}}
        )
        trials = [{**c.params, "seed": s} for c in table.configs for s in c.seeds]
        adapter = create_scheduler(
            settings, SchedulerContext(epochs=table.epochs, trials=trials, seeds=len(self.seeds))
        )
        if not hasattr(getattr(adapter, "core", None), "decide"):
            raise ConfigError(
                "method", f"scheduler {method.scheduler!r} has no decision core (a Ray "
                "TrialScheduler only): the replay cannot drive it"
            )  # fmt: skip
        return CoreRule(adapter)

    def replay(self, method: Method, seed: int) -> Replay:
        """One replay of ``method`` with seed ``seed``."""
        return simulate(
            self.table, self.search(method, seed), self.rule(method, seed), self.objectives,
            self.workers,
        )  # fmt: skip


REFERENCES = ("informed-order", "moasha-told-finals")
"""What the table allows, beside the methods (they know the final values, so they are not
methods): ``informed-order`` (:func:`informed_order`, no stopping, one replay: it is
deterministic) and ``moasha-told-finals`` (``moasha`` in ``moasha``'s grid orders, stopping on
the objectives' final values at every rung, :func:`told_finals`). Read them against
``moasha``: far below ``moasha-told-finals``, it is limited by the per-epoch signal; close to
it, by the table's horizon and order; ``informed-order`` says whether the target is reachable
at all."""


def references(bench: Bench, replays: int, workers: int) -> dict[str, list[Replay]]:
    """The :data:`REFERENCES`' trajectories on the bench's table."""
    from lipsweep.search.protocol import ListMember, Repeats

    table, objectives = bench.table, bench.objectives
    names = [n for n, _ in objectives]
    told = told_finals(table, names)
    told_bench = dataclasses.replace(bench, table=told, stops=objectives)
    grid_moasha = parse_method("moasha")
    order = ListMember([dict(c.params) for c in informed_order(table, objectives)])
    informed = Repeats(TableMember(order, table), bench.seeds, names)
    return {
        "informed-order": [simulate(table, informed, NoStop(), objectives, workers)],
        "moasha-told-finals": [
            simulate(
                told,
                told_bench.search(grid_moasha, seed),
                told_bench.rule(grid_moasha, seed),
                objectives,
                workers,
            )  # fmt: skip
            for seed in range(replays)
        ],
    }


def make_bench(
    table: Table,
    objectives: Sequence[tuple[str, str]],
    stop_on: Sequence[tuple[str, str]] = (),
    workers: int = 4,
    grace_period: int = MoashaSettings.grace_period,
    reduction_factor: float = MoashaSettings.reduction_factor,
    confidence: float = MoashaSettings.confidence,
) -> Bench:
    """The :class:`Bench` of ``table`` (every configuration must have the same seeds)."""
    seeds = table.configs[0].seeds
    odd = next((c for c in table.configs if sorted(c.seeds) != sorted(seeds)), None)
    if odd is not None:
        raise ConfigError(
            "table", f"{odd.key} has seeds {list(odd.seeds)}, the first configuration "
            f"{list(seeds)}: every configuration must have the same seeds"
        )  # fmt: skip
    stops = tuple(stop_metrics(table, objectives, stop_on))
    return Bench(
        table, tuple(objectives), stops, tuple(seeds), grace_period, reduction_factor,
        confidence, workers,
    )  # fmt: skip
