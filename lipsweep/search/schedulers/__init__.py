"""The scheduler family: early stopping of sweep trials, one file per scheduler.

The family's index (a :class:`~lipsweep.core.registry.Family`): each member is declared with
its frozen settings dataclass (validated in ``__post_init__``, errors naming
``scheduler.<field>``) and the import path of its factory, so a space parses and
``--dry-run`` checks ``scheduler: {type: NAME, ...}`` without torch, Ray or MLflow. A member is
its settings class and its decision core in a file here, and its factory ``create(settings,
ctx)``, which returns a :class:`~lipsweep.search.schedulers.cores.Decider` (the core and how
it groups trials; the built-ins': :mod:`lipsweep.search.schedulers.cores`). All of it is
torch-, Ray- and MLflow-free: :func:`lipsweep.sweep.schedulers.create_tune_scheduler` wraps a
Decider in the family's Ray Tune adapter, and the replay benchmark drives it directly. Adding a
scheduler is its file, one ``declare`` line below, and its tests. A plugin's factory may
instead return a Ray Tune ``TrialScheduler``: the sweep runs it as is, and the replay drives
it if it carries ``core`` and ``group`` (the family's adapter, ``CoreScheduler``, does).

Members: ``asha`` (ASHA on one metric, each trial alone) and ``moasha`` (multi-objective,
seed-aware, noise-aware ASHA). Both decide with one plain-Python core,
:class:`lipsweep.search.schedulers.moasha.MoAsha`, a member of the search protocol
(:mod:`lipsweep.search.protocol`) that the Tune adapter and the replay benchmark drive alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional, Sequence

from lipsweep.core.config_base import ConfigError, key_name, show
from lipsweep.core.registry import Family
from lipsweep.search.schedulers.asha import AshaSettings
from lipsweep.search.schedulers.moasha_settings import MoashaSettings

STATE_FILE = "lipsweep_scheduler.json"
"""A stateful scheduler's saved state (read by ``--resume``): :func:`state_path`."""
SCHEDULERS: Family[Any] = Family(
    "scheduler",
    unknown=lambda name, known: ConfigError(
        "scheduler.type", f"unknown scheduler {show(name)}; known schedulers are {known}"
    ),
)
_CORES = "lipsweep.search.schedulers.cores"  # the built-ins' factories, Ray-free
SCHEDULERS.declare("asha", f"{_CORES}:create_asha", settings=AshaSettings)
SCHEDULERS.declare("moasha", f"{_CORES}:create_moasha", settings=MoashaSettings)


@dataclass(frozen=True)
class SchedulerContext:
    """What a factory may need of the sweep besides its settings."""

    epochs: int = 40
    """Epochs of a full trial (the space's ``fixed.epochs``): the default ``max_t``."""
    trials: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    """The space's expanded flat trials (empty for a searcher that samples them lazily)."""
    state_path: Optional[str] = None
    """Where a scheduler with state keeps it for ``--resume`` (None: kept in memory only)."""
    resume: bool = False
    """``--resume``: read the state saved at ``state_path`` before the first decision."""
    seeds: int = 1
    """Seeds each configuration a learning searcher draws runs (``repeat: {seed: [...]}``)."""


def state_path(storage: str, experiment: str) -> str:
    """Where a stateful scheduler keeps its state: ``<storage>/.<experiment>.<STATE_FILE>``,
    beside Tune's experiment folder, not in it. A resumed Tune copies its experiment folder
    to a staging folder and, at the end, back over the original, which would put back the
    state saved before the interruption (seen on Ray 2.60 with local storage)."""
    return f"{storage.rstrip('/')}/.{experiment}.{STATE_FILE}"


# The family's names (methods of the one family object): ``@register_scheduler(name,
# settings=...)`` adds ``create(settings, ctx) -> Decider`` with its settings class.
register_scheduler = SCHEDULERS.register
unregister_scheduler = SCHEDULERS.unregister
list_schedulers = SCHEDULERS.names
is_scheduler = SCHEDULERS.is_member


def scheduler_settings(raw: Any) -> Any:
    """``scheduler: {type: NAME, ...}`` -> NAME's validated settings (``type`` defaults to
    ``asha``). ConfigError naming ``scheduler.<field>`` for anything wrong."""
    if not isinstance(raw, dict):
        raise ConfigError("scheduler", "must be a mapping")
    name = raw.get("type", "asha")
    if not isinstance(name, str):
        raise ConfigError("scheduler.type", f"must be one of {list_schedulers()}, got {show(name)}")
    cls = SCHEDULERS.entry(name).settings
    allowed = {"type"} | {f.name for f in fields(cls)}
    unknown = sorted((k for k in raw if k not in allowed), key=str)
    if unknown:
        raise ConfigError(
            f"scheduler.{key_name(unknown[0])}",
            f"unknown key for scheduler {name}; allowed: {sorted(allowed)}",
        )
    return cls(**{k: v for k, v in raw.items() if k != "type"})


def create_scheduler(settings: Any, ctx: Optional[SchedulerContext] = None) -> Any:
    """The member of validated ``settings`` as its factory builds it: a
    :class:`~lipsweep.search.schedulers.cores.Decider` for the built-ins (no Ray imported), or
    a plugin's Ray Tune ``TrialScheduler``."""
    return SCHEDULERS.create(settings.type, settings, ctx or SchedulerContext())


# Installed plugins add schedulers too, read on the family's first use (core/registry.py).
SCHEDULERS.use_entry_points("lipsweep.schedulers")
