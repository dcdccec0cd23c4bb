"""Settings of the built-in searchers (frozen, validated once; torch/Ray/Optuna-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from lipsweep.core.config_base import ConfigError, show
from lipsweep.search.searchers._registry import SearchSettings


@dataclass(frozen=True)
class RandomSettings(SearchSettings):
    """``random``: ``num_samples`` draws of ``search.space`` with ``random.Random(seed)``,
    made when the space is loaded (``--dry-run`` lists them), crossed with ``repeat``."""


@dataclass(frozen=True)
class OptunaSettings(SearchSettings):
    """An Optuna sampler (Akiba et al. 2019, arXiv 1907.10902) drawing ``num_samples`` trials
    define-by-run; it is told each trial's final ``metric`` values (several: a multi-objective
    study) and, for one objective, sent its per-epoch values as intermediate values."""


@dataclass(frozen=True)
class NSGASettings(OptunaSettings):
    """NSGA-II (Deb et al. 2002) / NSGA-III (Deb & Jain 2014): a genetic algorithm over
    generations of ``population_size`` trials."""

    population_size: Optional[Any] = None
    """Trials per generation (None: Optuna's default, 50); the first generation is random, so
    keep it well below ``num_samples``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        p = self.population_size
        if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 2):
            raise ConfigError("search.population_size", f"must be an integer >= 2, got {show(p)}")
