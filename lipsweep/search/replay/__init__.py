"""``lipsweep bench-search``: replay search methods on a recorded table.

A recorded table holds, for every configuration of a grid and each of its seeds, every
epoch's seconds and per-epoch metrics (clean accuracy, losses, robustness probes) and, at the
last epoch, the final metrics (PGD, AutoAttack, ‖J_f‖). Replaying a method on it simulates a
sweep on ``workers`` parallel workers: a trial's epochs take the recorded seconds, a
scheduler sees each epoch's values only when that epoch ends (so it cannot peek at the
future), and a searcher learns a configuration's seed-mean final objectives when its last
seed ends. Compute is worker-seconds spent, as a fraction of what the whole grid costs.

The score is the hypervolume of the configurations that ran their full budget (every seed,
every epoch), seed-averaged, relative to the whole grid's front with the reference point of
that front (:mod:`lipsweep.core.hypervolume`). Each method is replayed ``replays`` times with
seeds ``0..replays-1``; the same table, seed and flags give the same summary, to the digit
(per-replay values are kept unrounded).

A method is a registered searcher, optionally with a registered scheduler
(``SEARCHER+SCHEDULER``, plugins included; :func:`parse_method`, :data:`ALIASES`). Both are
built by their registry's factory, as a live sweep builds them, and driven through the
search protocol (:mod:`lipsweep.search.protocol`): the searcher's Tune ``Searcher`` (or its
list of trials, for ``grid`` and ``random``) proposes configurations of the table
(:func:`table_space`, :class:`TableMember`), each run once per seed (``Repeats``, the code the
live sweep's ``repeat:`` runs), and the scheduler's core decides at each epoch's report as
the Tune adapter has it decide (:class:`CoreRule`). Where Syne Tune imports (the
benchmark-only ``bench`` extra), ``syne-moasha`` is a peer from outside lipsweep: the grid
order with Syne Tune's own MO-ASHA deciding (:class:`SyneMoashaRule`).

Beside the methods, two references that know the final values (:data:`REFERENCES`) say what
the table allows: ``informed-order`` (:func:`informed_order`) and ``moasha-told-finals``
(:func:`told_finals`).

The modules: :mod:`~lipsweep.search.replay.table` (the recorded table),
:mod:`~lipsweep.search.replay.members` (the searchers and rules on it),
:mod:`~lipsweep.search.replay.simulation` (the simulated workers),
:mod:`~lipsweep.search.replay.methods` (``--method`` and the references),
:mod:`~lipsweep.search.replay.oracle` (what knowing the finals allows) and
:mod:`~lipsweep.search.replay.report` (``summary.json`` and the plot); :func:`bench_search`
runs them.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import numpy as np

from lipsweep.core.config_base import ConfigError
from lipsweep.search.replay.members import (
    SYNE_INSTALL,
    SYNE_MOASHA,
    CoreRule,
    NoStop,
    SyneMoashaRule,
    TableMember,
    grid_order,
    random_draws,
    syne_tune_missing,
    table_space,
)
from lipsweep.search.replay.methods import (
    ALIASES,
    DEFAULT_METHODS,
    NSGA_POPULATION,
    REFERENCES,
    Bench,
    Method,
    make_bench,
    parse_method,
    references,
)
from lipsweep.search.replay.oracle import (
    front_keys,
    informed_order,
    oracle_stopping,
)
from lipsweep.search.replay.report import (
    KEPT,
    TARGET,
    _median,
    _scores,
    front_kept,
    plot,
    write,
)
from lipsweep.search.replay.simulation import (
    Replay,
    Tally,
    simulate,
)
from lipsweep.search.replay.table import (
    CONFIG,
    EPOCH,
    PARAM_PREFIX,
    SECONDS,
    SEED,
    Config,
    Table,
    check_objectives,
    first_seeds,
    iter_rows,
    load_table,
    stop_metrics,
    told_finals,
)
from lipsweep.search.schedulers.moasha_settings import MoashaSettings, check_flags

_log = logging.getLogger(__name__)

__all__ = [
    "ALIASES",
    "Bench",
    "CONFIG",
    "Config",
    "CoreRule",
    "DEFAULT_METHODS",
    "EPOCH",
    "KEPT",
    "Method",
    "NSGA_POPULATION",
    "NoStop",
    "PARAM_PREFIX",
    "REFERENCES",
    "Replay",
    "SECONDS",
    "SEED",
    "SYNE_INSTALL",
    "SYNE_MOASHA",
    "SyneMoashaRule",
    "TARGET",
    "Table",
    "TableMember",
    "Tally",
    "_median",
    "_scores",
    "bench_search",
    "check_objectives",
    "first_seeds",
    "front_kept",
    "front_keys",
    "grid_order",
    "informed_order",
    "iter_rows",
    "load_table",
    "make_bench",
    "oracle_stopping",
    "parse_method",
    "plot",
    "random_draws",
    "references",
    "simulate",
    "stop_metrics",
    "syne_tune_missing",
    "table_space",
    "told_finals",
    "write",
]


def _quiet_optuna() -> None:
    try:
        import optuna
    except ImportError:  # pragma: no cover - optuna is a dependency
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def bench_search(
    table: Table,
    objectives: Sequence[tuple[str, str]],
    budget: float,
    replays: int,
    workers: int,
    stop_on: Sequence[tuple[str, str]] = (),
    only: Sequence[str] = (),
    grace_period: int = MoashaSettings.grace_period,
    reduction_factor: float = MoashaSettings.reduction_factor,
    confidence: float = MoashaSettings.confidence,
    seeds: Optional[int] = None,
) -> tuple[dict[str, Any], dict[str, list[Replay]]]:
    """Replay every method ``replays`` times, and the :data:`REFERENCES`; the summary dict
    and the trajectories (the references' too, by their names). ``seeds``: replay with the
    first ``seeds`` seeds of every configuration (:func:`first_seeds`). Everything is checked
    against the table before the first replay."""
    if seeds is not None:
        table = first_seeds(table, seeds)
    check_objectives(table, objectives)
    _quiet_optuna()  # a study per replay: no banner each
    check_flags(grace_period, reduction_factor, confidence)
    if grace_period > table.epochs:
        raise ConfigError(
            "grace_period", f"must be at most the table's {table.epochs} epochs, "
            f"got {grace_period}"
        )  # fmt: skip
    bench = make_bench(
        table, objectives, stop_on, workers, grace_period, reduction_factor, confidence
    )
    stops = bench.stops
    chosen = [parse_method(m) for m in (only or DEFAULT_METHODS)]
    if not only and syne_tune_missing() is None:
        chosen.append(parse_method(SYNE_MOASHA))
    if any(m.scheduler == SYNE_MOASHA for m in chosen) and syne_tune_missing() is not None:
        raise ConfigError(
            "method", f"{SYNE_MOASHA} needs Syne Tune, which does not import here "
            f"({syne_tune_missing()}); install it with {SYNE_INSTALL}"
        )  # fmt: skip
    for method in chosen:  # every member builds (its settings checked) before any replay
        bench.search(method, 0)
        bench.rule(method, 0)
    runs: dict[str, list[Replay]] = {}
    for method in chosen:
        runs[method.name] = [bench.replay(method, seed) for seed in range(replays)]
        _log.info(
            "%s: median hypervolume %.3f at %.0f%% of the compute",
            method.name,
            float(np.median([r.hv_at(budget) for r in runs[method.name]])),
            100 * budget,
        )
    refs = references(bench, replays, workers)
    summary = {
        "objectives": [f"{n}:{d}" for n, d in objectives],
        "stop_on": [f"{n}:{d}" for n, d in stops],
        "budget": budget,
        "replays": replays,
        "workers": workers,
        "grace_period": grace_period,
        "reduction_factor": reduction_factor,
        "confidence": confidence,
        "seeds": len(bench.seeds),
        "grid": {"configurations": len(table.configs), "compute_s": table.compute},
        "oracle_compute_fraction": oracle_stopping(table, objectives, grace_period)[
            "seeds together"
        ][1],
        "methods": {name: _scores(rs, budget) for name, rs in runs.items()},
        "references": {name: _scores(rs, budget) for name, rs in refs.items()},
    }
    return summary, runs | refs
