"""The searcher family, a :class:`~lipsweep.core.registry.Family`: ``register_searcher`` /
``create_searcher`` / ``list_searchers`` are its methods.

A searcher decides which trial configs Tune runs (``search.algorithm`` in a space; ``grid`` is
the searcher of a ``grid:`` space). Each member has a frozen settings dataclass (the keys of
its ``search:`` block besides ``algorithm`` and ``space``, validated in ``__post_init__``) and
light facts (:class:`SearcherInfo`), so a space validates without Ray or Optuna. Its
implementation, imported on :func:`create_searcher`, turns the settings and a
:class:`SearchRequest` into a :class:`TunePlan`: what ``tune.TuneConfig`` needs.

Torch-, Ray-, MLflow- and Optuna-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from lipsweep.core import metric_names
from lipsweep.core.config_base import INT_LIMIT, ConfigError, show
from lipsweep.core.registry import Family, import_path

MAX_SAMPLES = 100_000  # more is a typo (as space.MAX_TRIALS)


@dataclass(frozen=True)
class SearcherInfo:
    """What a space needs to know of a searcher without importing it."""

    sampled: bool = True
    """Spelled ``search: {algorithm: NAME}`` (``grid`` is spelled ``grid:`` instead)."""
    lazy: bool = False
    """Draws trials during the sweep, learning from results (Optuna); otherwise the trials are
    drawn when the space is loaded, so ``--dry-run`` lists them (random)."""
    objectives: bool = False
    """Learns from ``search.metric`` / ``search.mode``: they must be reported metrics."""
    study: bool = False
    """Keeps an Optuna study in an RDB storage (``--resume`` continues it)."""
    summary: str = ""
    member: str = ""
    """Import path (``module:factory``) of a Ray-free factory ``(settings, SearchRequest) ->
    member`` (:mod:`lipsweep.search.protocol`), what the replay benchmark drives; empty: it
    drives the plan's Tune ``Searcher`` (:func:`create_member`)."""


def _int_in(val: Any, lo: int, hi: int) -> bool:
    return isinstance(val, int) and not isinstance(val, bool) and lo <= val <= hi


def _as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


@dataclass(frozen=True)
class SearchSettings:
    """The ``search:`` block's settings every sampled searcher reads (errors name the key)."""

    num_samples: Any = None
    """How many configurations are drawn (required)."""
    seed: Any = 0
    """Seed of the draws (the random searcher's RNG, the Optuna sampler's seed)."""
    metric: Any = metric_names.attack_metric("pgd", 4)
    """Objective(s) a learning searcher optimises: one final metric name or a list."""
    mode: Any = "max"
    """``max`` or ``min``, one per metric."""

    def __post_init__(self) -> None:
        n = self.num_samples
        if not _int_in(n, 1, MAX_SAMPLES):
            raise ConfigError(
                "search.num_samples", f"must be an integer in [1, {MAX_SAMPLES}], got {show(n)}"
            )
        if not _int_in(self.seed, -INT_LIMIT, INT_LIMIT):
            raise ConfigError("search.seed", f"must be an integer, got {show(self.seed)}")
        metric = _as_tuple(self.metric)
        if not metric or not all(isinstance(m, str) and m for m in metric):
            raise ConfigError(
                "search.metric", f"must be a metric name or a list of them, got {show(self.metric)}"
            )
        mode = _as_tuple(self.mode)
        if len(mode) != len(metric) or any(m not in ("max", "min") for m in mode):
            raise ConfigError(
                "search.mode",
                f"needs one of max/min per metric {list(metric)}, got {show(self.mode)}",
            )
        object.__setattr__(self, "metric", metric)
        object.__setattr__(self, "mode", mode)


@dataclass(frozen=True)
class GridSettings:
    """The grid searcher has no settings: its trials are the ``grid:`` blocks."""


@dataclass(frozen=True)
class SearchRequest:
    """What a searcher builds its plan from (the driver fills it in)."""

    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Settings shared by every trial (``fixed:``)."""
    space: Any = None
    """The parsed ``search.space``, if any
    (:class:`lipsweep.search.space_distributions.SearchSpace`)."""
    trials: list[dict[str, Any]] = field(default_factory=list)
    """Trials drawn when the space was loaded (grid, random)."""
    study_db: Optional[Path] = None
    """SQLite file of the Optuna study (:func:`lipsweep.search.searchers.study.study_db`)."""
    study_name: str = "lipsweep"
    """The Optuna study's name: the sweep's ``--experiment``."""
    repeats: list[dict[str, Any]] = field(default_factory=list)
    """``repeat:``'s points (``[{"seed": 0}, {"seed": 1}]``): a learning searcher runs each
    draw once per seed and learns the seed-mean (one: each draw once, with that seed)."""
    normalise: bool = True
    """Draws are trial settings, checked and defaults filled in (False: a recorded table's
    settings, kept as they are, in the replay benchmark)."""
    algorithm: str = ""
    """The searcher's name (:func:`create_searcher` and :func:`create_member` fill it in): one
    factory can serve several searchers (the Optuna samplers)."""


@dataclass(frozen=True)
class TunePlan:
    """What ``tune.TuneConfig`` / ``tune.Tuner`` take from a searcher."""

    search_alg: Any = None
    """A Tune ``Searcher`` (None: Tune's BasicVariantGenerator over ``param_space``)."""
    param_space: Optional[dict[str, Any]] = None
    num_samples: int = 1
    storage_url: Optional[str] = None
    """The Optuna study's storage URL (``optuna-dashboard URL`` shows it), if any."""


def _unknown(name: Any, known: list[str]) -> ConfigError:
    sampled = [n for n in known if SEARCHERS.spec(n).sampled]
    return ConfigError(
        "search.algorithm", f"unknown searcher {show(name)}; known searchers are {sampled}"
    )


SEARCHERS: Family[Callable[..., TunePlan]] = Family(
    "searcher", spec_type=SearcherInfo, unknown=_unknown, default_settings=SearchSettings
)
"""The family (its index, :mod:`lipsweep.search.searchers`, declares the built-ins)."""

# The family's names (methods of the one family object): ``@register_searcher(name,
# settings=..., info=SearcherInfo(...))`` adds ``factory(settings, request) -> TunePlan``
# (settings default to :class:`SearchSettings`, facts to ``SearcherInfo()``).
register_searcher = SEARCHERS.register
unregister_searcher = SEARCHERS.unregister
list_searchers = SEARCHERS.names
is_searcher = SEARCHERS.is_member
searcher_entry = SEARCHERS.entry
searcher_info = SEARCHERS.spec
searcher_settings = SEARCHERS.settings
"""Searcher ``name``'s frozen settings from the ``search:`` block (ConfigError names the key;
the block's keys were checked by the caller)."""


def create_searcher(name: str, settings: Any, request: SearchRequest) -> TunePlan:
    """Searcher ``name``'s :class:`TunePlan` for ``request`` (imports Ray, Optuna)."""
    return SEARCHERS.create(name, settings, replace(request, algorithm=name))


def declare_searcher(name: str, impl: str, settings: type, info: SearcherInfo) -> None:
    """Declare a built-in by the import path of its factory (imported on first create)."""
    SEARCHERS.declare(name, impl, spec=info, settings=settings)


def create_member(name: str, settings: Any, request: SearchRequest) -> Optional[Any]:
    """Searcher ``name``'s Ray-free member for ``request`` (:attr:`SearcherInfo.member`,
    imported here), or None when it names none."""
    path = getattr(searcher_info(name), "member", "")
    return import_path(path)(settings, replace(request, algorithm=name)) if path else None


def settings_keys(name: str) -> set[str]:
    """The ``search:`` keys searcher ``name`` reads (``algorithm`` and ``space`` included)."""
    return {"algorithm", "space", *(f.name for f in fields(searcher_entry(name).settings))}


def all_settings_keys() -> set[str]:
    """Every key some searcher reads: a key outside this set is a typo whatever the algorithm."""
    return set().union(*(settings_keys(n) for n in list_searchers()))
