"""The options of each command: one frozen dataclass per ``lipsweep`` subcommand.

The command line is made from them (:mod:`lipsweep.cli.parser`): a field is a flag of the
same name (argparse's ``dest``), with its default, and its docstring is the flag's help.
Each dataclass checks its own fields once, in ``__post_init__``: a bad value raises
:class:`~lipsweep.core.config_base.ConfigError` naming the field (``num_cpus``, ``top``...;
the CLI shows the flag, ``--num-cpus``), before anything is read, written or started. What
only the world can answer (does the store exist, is the folder writable, is the Ray address
reachable) is checked by the command itself, still before its first write.

:class:`SweepOptions` lives beside the sweep driver that reads it
(:mod:`lipsweep.sweep.options`). Torch-free and light: ``sweep --dry-run`` builds it without
importing torch, Ray or MLflow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from lipsweep.core.config_base import INT_LIMIT, ConfigError, check_int, show
from lipsweep.core.options import (
    check_bool,
    check_experiment_name,
    check_ray_address,
    check_text,
    check_texts,
    cli,
    default_tracking_uri,
    set_field,
    settings_field,
)
from lipsweep.core.shipped import CONFIGS, SPACES, resolve
from lipsweep.search.schedulers.moasha_settings import MoashaSettings, check_flags
from lipsweep.sweep.options import SweepOptions

if TYPE_CHECKING:
    from lipsweep.settings.config import TrialConfig

__all__ = [
    "OPTIONS",
    "TRAIN_OUT",
    "BenchSearchOptions",
    "ConfirmOptions",
    "DataPrepareOptions",
    "DemoOptions",
    "ExportOptions",
    "ParetoOptions",
    "ReportOptions",
    "SweepOptions",
    "TrainOptions",
    "make_options",
]

OBJECTIVE = "NAME:max|min"
TRAIN_OUT = "runs/train"
"""``lipsweep train``'s output folder unless ``out`` names one (its parents are created)."""


def _objectives(obj: Any) -> None:
    check_texts(obj, "objective")
    if obj.objective:
        from lipsweep.decide.pareto import resolve_objectives

        resolve_objectives(obj.objective)  # ConfigError naming objective and the bad part


def _tracking(obj: Any) -> None:
    check_text(obj, "tracking_uri")


# -- one dataclass per command ------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """``lipsweep train [CONFIG] [--out DIR] [--overwrite] [--set KEY=VALUE ...]``."""

    config: Union[str, Mapping[str, Any], "TrialConfig", None] = field(
        default=None, metadata=cli(positional=True, metavar="CONFIG")
    )
    """Flat YAML of trial settings, or the name of a shipped config (``tiny``) (None: the
    defaults of every setting, plus ``overrides``). From Python: also a dict of settings or a
    ``TrialConfig``, checked as a file's settings are."""
    out: str = TRAIN_OUT
    """Output folder (checkpoints, metrics.json, artifacts); the same config resumes there,
    a different one is refused."""
    overwrite: bool = False
    """Delete ``out`` first and start over; only a folder an earlier train made is deleted."""
    overrides: tuple[str, ...] = field(default=(), metadata=cli(flag="--set", metavar="KEY=VALUE"))
    """``KEY=VALUE`` settings over the config, each value parsed as YAML (``epochs=3``)."""

    def __post_init__(self) -> None:
        from lipsweep.settings.config import TrialConfig, parse_override

        if isinstance(self.config, Mapping):  # checked now, as a file's settings are
            set_field(self, "config", TrialConfig.from_flat(dict(self.config), source="config"))
        elif not isinstance(self.config, TrialConfig):
            check_text(self, "config", optional=True, path=True)
            if self.config is not None:
                set_field(self, "config", resolve(CONFIGS, self.config, "config"))
        check_text(self, "out", path=True)
        check_bool(self, "overwrite")
        check_texts(self, "overrides")
        if self.overrides is None:
            raise ConfigError("overrides", "must be a list of KEY=VALUE strings, got None")
        for item in self.overrides:
            parse_override(item)  # ConfigError naming overrides or the key


@dataclass(frozen=True, kw_only=True)
class ParetoOptions:
    """``lipsweep pareto --experiment NAME [--objective NAME:max|min ...] [--per-run]``."""

    experiment: str
    """MLflow experiment of the sweep."""
    objective: Optional[tuple[str, ...]] = field(default=None, metadata=cli(metavar=OBJECTIVE))
    """Objectives ``NAME:max|min`` (None: acc_clean:max acc_pgd_4:max acc_aa_2:max
    lip_jacobian_median:min)."""
    per_run: bool = False
    """Rank single runs even when an arm (configs that differ only in seed) has 2+ seeds."""
    tracking_uri: str = field(default_factory=default_tracking_uri)
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, or a SQLite store mlflow.db in
    the working folder)."""

    def __post_init__(self) -> None:
        check_text(self, "experiment")
        _objectives(self)
        check_bool(self, "per_run")
        _tracking(self)


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """``lipsweep export --experiment NAME --out DIR [--run-id ID | --select RULE] ...``."""

    experiment: str
    """MLflow experiment of the sweep."""
    out: str
    """Output folder (missing or empty; ``force`` replaces a previous export only)."""
    run_id: Optional[str] = None
    """Export this child run (None: pick one by ``select`` on the front)."""
    select: Optional[str] = None
    """Selection rule on the front, e.g. 'pgd4-within-clean:1.0' (None: that) or
    'max:acc_aa_2'."""
    objective: Optional[tuple[str, ...]] = field(default=None, metadata=cli(metavar=OBJECTIVE))
    """Objectives defining the front (as for pareto)."""
    per_run: bool = False
    """Select among single runs even when an arm has 2 or more seeds."""
    force: bool = False
    """Replace a previous export in ``out``."""
    register: Optional[str] = field(default=None, metadata=cli(metavar="MODEL_NAME"))
    """Also register the export in the MLflow model registry under this name."""
    tracking_uri: str = field(default_factory=default_tracking_uri)
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, or a SQLite store mlflow.db in
    the working folder)."""

    def __post_init__(self) -> None:
        check_text(self, "experiment")
        check_text(self, "out", path=True)
        check_text(self, "run_id", optional=True)
        check_text(self, "select", optional=True)
        if self.select is not None:
            from lipsweep.decide.selection import parse_selection_rule

            parse_selection_rule(self.select)
        _objectives(self)
        check_bool(self, "per_run")
        check_bool(self, "force")
        if self.register is not None:  # "" is refused too, by MLflow's own rule
            if not isinstance(self.register, str):
                raise ConfigError("register", f"must be a model name, got {show(self.register)}")
            from lipsweep.tracking.model import check_model_name

            check_model_name(self.register)
        _tracking(self)


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """``lipsweep report --experiment NAME [--out DIR] [--objective NAME:max|min ...]``."""

    experiment: str
    """MLflow experiment of the sweep."""
    out: Optional[str] = None
    """Output folder, made with its parents (None: reports/EXPERIMENT)."""
    objective: Optional[tuple[str, ...]] = field(default=None, metadata=cli(metavar=OBJECTIVE))
    """Objectives of the Pareto figure (as for pareto)."""
    tracking_uri: str = field(default_factory=default_tracking_uri)
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, or a SQLite store mlflow.db in
    the working folder)."""

    def __post_init__(self) -> None:
        check_text(self, "experiment")
        check_text(self, "out", optional=True, path=True)
        _objectives(self)
        _tracking(self)


@dataclass(frozen=True, kw_only=True)
class ConfirmOptions:
    """``lipsweep confirm --experiment NAME [--top N | --run-id ID ...] [--images N]``."""

    experiment: str
    """MLflow experiment of the sweep."""
    top: Optional[int] = field(default=None, metadata=cli(metavar="N"))
    """The N best by Pareto rank: arms (every run of each) when an arm has 2 or more seeds,
    else runs (None: the front)."""
    run_id: Optional[tuple[str, ...]] = field(
        default=None, metadata=cli(action="extend", nargs="+", metavar="ID")
    )
    """Confirm these child runs instead of the front."""
    images: int = field(default=0, metadata=cli(metavar="N"))
    """Test images: the seeded subset of N (0: the whole test split of the run's data)."""
    ray_address: Optional[str] = None
    """Run each evaluation as a Ray task on this cluster (None: here, one after the other);
    the flag is ``--ray-address``, as for ``sweep`` (``--address`` is a deprecated alias)."""
    tracking_uri: str = field(default_factory=default_tracking_uri)
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, or a SQLite store mlflow.db in
    the working folder)."""

    def __post_init__(self) -> None:
        check_text(self, "experiment")
        check_texts(self, "run_id")
        if self.top is not None and self.run_id:
            raise ConfigError("top", "excludes run_id; give one of the two")
        if self.top is not None:
            check_int("top", self.top, 1)
        check_int("images", self.images, 0, why=" (0: the whole test split)")
        check_ray_address(self)
        _tracking(self)


@dataclass(frozen=True, kw_only=True)
class DemoOptions:
    """``lipsweep demo``: the smoke sweep, its Pareto front and the export of its pick."""

    space: Optional[str] = None
    """Search space, a path or a shipped name (None: the shipped ``smoke``)."""
    experiment: str = "smoke"
    """Experiment name."""
    out: Optional[str] = None
    """Export folder (None: exports/smoke-best)."""
    storage: Optional[str] = None
    """Ray Tune storage path."""
    num_cpus: Optional[int] = None
    """CPUs of the local Ray instance."""
    tracking_uri: str = field(default_factory=default_tracking_uri)
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, or a SQLite store mlflow.db in
    the working folder)."""

    def __post_init__(self) -> None:
        check_text(self, "space", optional=True, path=True)
        if self.space is not None:
            set_field(self, "space", resolve(SPACES, self.space, "space"))
        check_text(self, "experiment")
        check_experiment_name(self.experiment)
        check_text(self, "out", optional=True, path=True)
        check_text(self, "storage", optional=True, path=True)
        if self.num_cpus is not None:
            check_int("num_cpus", self.num_cpus, 1)
        _tracking(self)


@dataclass(frozen=True, kw_only=True)
class BenchSearchOptions:
    """``lipsweep bench-search``: replay search methods on a recorded table (docs/benchmarks.md)."""

    table: str
    """The recorded table (CSV; benchmarks/data/)."""
    objective: tuple[str, ...] = field(default=(), metadata=cli(metavar=OBJECTIVE))
    """``NAME:max|min`` of final columns (the front the hypervolume is taken of)."""
    stop_on: tuple[str, ...] = field(default=(), metadata=cli(metavar=OBJECTIVE))
    """``NAME:max|min`` of per-epoch columns moasha stops on (default: each objective's
    per-epoch counterpart, ``probe_<name>`` where the objective is final only)."""
    budget: float = 0.4
    """Compute budget, a fraction of the whole grid's worker-seconds, in (0, 1]."""
    replays: int = 10
    """Replays per method (seeds 0..replays-1)."""
    workers: int = 4
    """Simulated parallel workers."""
    grace_period: int = settings_field(MoashaSettings, "grace_period")
    reduction_factor: float = settings_field(MoashaSettings, "reduction_factor")
    confidence: float = settings_field(MoashaSettings, "confidence")
    seeds: Optional[int] = field(default=None, metadata=cli(metavar="N"))
    """Replay with the first N seeds of every configuration (what the same sweep would have
    seen with N seeds; 1: the paper spaces' ``seeds: [0]``); default: every seed."""
    method: tuple[str, ...] = ()
    """Methods to replay: a registered searcher, ``SEARCHER+SCHEDULER`` (plugins included) or
    a short name (``asha-clean``, ``moasha``, ``optuna-moasha``); default: the usual set."""
    out: str = "bench-search"
    """Folder for summary.json and hypervolume.png."""

    def __post_init__(self) -> None:
        from lipsweep.decide.pareto import resolve_objectives

        check_text(self, "table", path=True)
        check_text(self, "out", path=True)
        for name in ("objective", "stop_on", "method"):
            check_texts(self, name)
        if not self.objective:
            raise ConfigError("objective", "give at least one, e.g. acc_clean:max")
        for name in ("objective", "stop_on"):  # pareto's rule: each spec valid, each metric once
            try:
                resolve_objectives(getattr(self, name))
            except ConfigError as err:
                raise ConfigError(name, err.message) from None
        b = self.budget
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b <= 1:
            raise ConfigError("budget", f"must be a fraction in (0, 1], got {show(b)}")
        for name in ("replays", "workers"):
            check_int(name, getattr(self, name), 1)
        if self.seeds is not None:
            check_int("seeds", self.seeds, 1)
        check_flags(self.grace_period, self.reduction_factor, self.confidence)
        for name in ("replays", "workers", "seeds"):
            if (getattr(self, name) or 0) > INT_LIMIT:
                raise ConfigError(name, f"must be at most {INT_LIMIT}")


def _prepared_datasets() -> list[str]:
    from lipsweep.data._registry import prepared_datasets

    return prepared_datasets()


@dataclass(frozen=True, kw_only=True)
class DataPrepareOptions:
    """``lipsweep data prepare --dataset NAME --source PATH --dest URI [--download]``."""

    dataset: str = field(metadata=cli(choices=_prepared_datasets))
    """The dataset to pack (one whose family member says ``data prepare`` packs it)."""
    source: str
    """The torchvision CIFAR root folder (the one holding cifar-10-batches-py or
    cifar-100-python) or an .npz with x_train, y_train, x_test, y_test."""
    dest: str
    """Folder or URI (s3://bucket/prefix, gs://..., file:///shared/data) that every worker
    can read; DEST/<dataset>.npz and its manifest (sha256) are written there."""
    download: bool = False
    """Let torchvision download CIFAR into ``source`` first (on this machine)."""

    def __post_init__(self) -> None:
        check_text(self, "dataset")
        known = _prepared_datasets()
        if self.dataset not in known:
            msg = f"must be one of {', '.join(sorted(known))}, got {show(self.dataset)}"
            raise ConfigError("dataset", msg)
        check_text(self, "source", path=True)
        check_text(self, "dest", path=True)
        check_bool(self, "download")


OPTIONS = {
    "train": TrainOptions,
    "sweep": SweepOptions,
    "pareto": ParetoOptions,
    "export": ExportOptions,
    "report": ReportOptions,
    "confirm": ConfirmOptions,
    "demo": DemoOptions,
    "bench-search": BenchSearchOptions,
}
"""Subcommand -> its options dataclass."""


def make_options(cls: type, options: Any, kwargs: dict[str, Any]) -> Any:
    """``options`` (an instance of ``cls``) or ``cls(**kwargs)``: what every API function
    takes. An unknown keyword is a ConfigError listing the known ones."""
    if options is not None:
        if kwargs:
            raise TypeError(f"pass either a {cls.__name__} or keyword options, not both")
        if not isinstance(options, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(options).__name__}")
        return options
    known = [f.name for f in dataclasses.fields(cls)]
    for key in kwargs:
        if key not in known:
            raise ConfigError(key, f"not an option of {cls.__name__}; known: {', '.join(known)}")
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and f.name not in kwargs
    ]
    if missing:
        raise ConfigError(missing[0], f"required by {cls.__name__}")
    return cls(**kwargs)
