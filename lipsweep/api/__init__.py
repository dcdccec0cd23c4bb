"""The Python API: each ``lipsweep`` command as a function with typed options and a typed result.

::

    from lipsweep import api

    swept = api.sweep(space="search_spaces/smoke.yaml", num_cpus=2)  # or SweepOptions(...)
    swept.counts, [r.run_id for r in swept.runs]
    front = api.pareto(experiment=swept.experiment).front
    api.export(experiment=swept.experiment, out="exports/best").folder

Each function takes either one options dataclass (:mod:`lipsweep.api.options`: the same
names and defaults as the command's flags) or its fields as keywords. The options are
checked when they are made: a bad value raises :class:`ConfigError` naming the field before
anything is read, written or started; what only the world can answer (an unknown experiment,
a non-empty folder, an existing sweep) raises :class:`UsageError` naming the fields, still
before the first write. The CLI (:mod:`lipsweep.cli`) is argparse around these functions: it
exits 2 on either error, naming the flags, and prints the result.

Importing this module is light (no torch, Ray or MLflow): each function imports what it
runs when it is called.

Each function shows lipsweep's INFO lines on stderr as the CLI does (the Optuna study's path,
each trial's events, the status lines), unless logging is already configured: then the
configuration you made decides (:func:`lipsweep.core.logs.show_info_lines`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, TypeVar

from lipsweep.api.options import (
    BenchSearchOptions,
    ConfirmOptions,
    DataPrepareOptions,
    DemoOptions,
    ExportOptions,
    ParetoOptions,
    ReportOptions,
    SweepOptions,
    TrainOptions,
    make_options,
)
from lipsweep.api.results import (
    BenchSearchResult,
    ConfirmedRun,
    ConfirmResult,
    DemoResult,
    ExportPick,
    ExportResult,
    FailedRun,
    FrontMember,
    OutcomeCounts,
    ParetoResult,
    PreparedData,
    ReportResult,
    ShippedSpace,
    SweepResult,
    TrainResult,
    TrialRun,
)
from lipsweep.core.config_base import ConfigError, UsageError
from lipsweep.core.logs import show_info_lines
from lipsweep.core.options import fields_for_flags

_F = TypeVar("_F", bound=Callable[..., Any])


def _naming_fields(cls: type) -> Callable[[_F], _F]:
    """A :class:`UsageError` out of the decorated function names ``cls``'s fields, not their
    flags; the flags' text stays on ``cli_text`` for the command line."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except UsageError as err:
                if err.cli_text is not None:
                    raise
                text = str(err)
                named = UsageError(fields_for_flags(text, cls))
                named.cli_text = text
                raise named from err.__cause__

        return call  # type: ignore[return-value]

    return wrap


__all__ = [
    "train",
    "sweep",
    "pareto",
    "report",
    "confirm",
    "export",
    "demo",
    "bench_search",
    "prepare_data",
    "models",
    "spaces",
    "settings_help",
    "DataPrepareOptions",
    "PreparedData",
    "ShippedSpace",
    "BenchSearchOptions",
    "BenchSearchResult",
    "TrainOptions",
    "SweepOptions",
    "ParetoOptions",
    "ReportOptions",
    "ConfirmOptions",
    "ExportOptions",
    "DemoOptions",
    "TrainResult",
    "SweepResult",
    "TrialRun",
    "OutcomeCounts",
    "ParetoResult",
    "FrontMember",
    "ExportPick",
    "ReportResult",
    "ConfirmResult",
    "ConfirmedRun",
    "FailedRun",
    "ExportResult",
    "DemoResult",
    "ConfigError",
    "UsageError",
]


@_naming_fields(TrainOptions)
def train(options: Optional[TrainOptions] = None, /, **kwargs: Any) -> TrainResult:
    """Train and evaluate one trial into ``out``, without Ray or MLflow (``lipsweep train``).

    Rerunning with the same config resumes from its last checkpoint; a different config is
    refused unless ``overwrite``."""
    show_info_lines()
    from lipsweep.api import _train

    return _train.run(make_options(TrainOptions, options, kwargs))


@_naming_fields(SweepOptions)
def sweep(options: Optional[SweepOptions] = None, /, **kwargs: Any) -> SweepResult:
    """Run a sweep on Ray Tune, logging to MLflow (``lipsweep sweep``).

    The whole space is validated first; then a local Ray instance starts and is stopped
    before the call returns, or ``ray_address`` is joined (and stays joined). A Ray already
    running in the process (a notebook's ``ray.init()``) is used as it is, with a warning naming
    any of ``num_cpus``, ``ray_address`` it leaves unapplied. A signal (SIGINT, SIGTERM,
    SIGHUP) stops the sweep cleanly: ``interrupted`` is set and ``resume=True`` continues it.
    ``dry_run`` only lists the trials (``planned``), without importing torch, Ray or MLflow."""
    show_info_lines()
    from lipsweep.api import _sweep

    return _sweep.run(make_options(SweepOptions, options, kwargs))


@_naming_fields(ParetoOptions)
def pareto(options: Optional[ParetoOptions] = None, /, **kwargs: Any) -> ParetoResult:
    """Rank a sweep's finished runs, tag them in MLflow and log the front to the parent run
    (``lipsweep pareto``); returns the front."""
    show_info_lines()
    from lipsweep.api import _decide

    return _decide.pareto(make_options(ParetoOptions, options, kwargs))


@_naming_fields(ExportOptions)
def export(options: Optional[ExportOptions] = None, /, **kwargs: Any) -> ExportResult:
    """Write a run's checkpoint as a self-describing folder (``lipsweep export``);
    ``lipsweep.load_exported(result.folder)`` loads it back."""
    show_info_lines()
    from lipsweep.api import _decide

    return _decide.export(make_options(ExportOptions, options, kwargs))


@_naming_fields(ReportOptions)
def report(options: Optional[ReportOptions] = None, /, **kwargs: Any) -> ReportResult:
    """Write the markdown report of a sweep's arms and log it to the parent run
    (``lipsweep report``)."""
    show_info_lines()
    from lipsweep.api import _decide

    return _decide.report(make_options(ReportOptions, options, kwargs))


@_naming_fields(ConfirmOptions)
def confirm(options: Optional[ConfirmOptions] = None, /, **kwargs: Any) -> ConfirmResult:
    """Re-evaluate the front's runs with standard AutoAttack and log ``acc_aa_std_<eps>``
    to them (``lipsweep confirm``)."""
    show_info_lines()
    from lipsweep.api import _confirm

    return _confirm.confirm(make_options(ConfirmOptions, options, kwargs))


@_naming_fields(DemoOptions)
def demo(options: Optional[DemoOptions] = None, /, **kwargs: Any) -> DemoResult:
    """The embedded default end to end: the smoke sweep, its front and the export of its
    pick (``lipsweep demo``)."""
    show_info_lines()
    from lipsweep.api import _demo

    return _demo.demo(make_options(DemoOptions, options, kwargs))


@_naming_fields(BenchSearchOptions)
def bench_search(
    options: Optional[BenchSearchOptions] = None, /, **kwargs: Any
) -> BenchSearchResult:
    """Replay the search methods on a recorded table and score the hypervolume each reaches
    within the compute budget (``lipsweep bench-search``; lipsweep/search/replay/)."""
    show_info_lines()
    from lipsweep.api import _bench

    return _bench.run(make_options(BenchSearchOptions, options, kwargs))


@_naming_fields(DataPrepareOptions)
def prepare_data(options: Optional[DataPrepareOptions] = None, /, **kwargs: Any) -> PreparedData:
    """Pack CIFAR once into ``DEST/<dataset>.npz`` plus its manifest, for every worker of a
    cluster to read (``lipsweep data prepare``); a space's ``data_dir`` names ``.file``."""
    show_info_lines()
    from lipsweep.api import _lists

    return _lists.prepare_data(make_options(DataPrepareOptions, options, kwargs))


def models() -> list[str]:
    """The timm ViT architectures lipsweep can build (``lipsweep models``)."""
    from lipsweep.api import _lists

    return _lists.models()


def spaces() -> list[ShippedSpace]:
    """The search spaces shipped with lipsweep (``lipsweep spaces``); ``sweep(space=name)``
    runs one."""
    from lipsweep.api import _lists

    return _lists.spaces()


def settings_help() -> str:
    """Every trial setting with its default and its doc (``lipsweep train --help-settings``):
    the keys of a config, a ``--set`` and a space's ``fixed``."""
    from lipsweep.api import _lists

    return _lists.settings_help()
