"""What an Optuna searcher draws with: the sampler each searcher name builds
(:func:`sampler_for`) and the define-by-run space over ``search.space`` (:class:`OptunaSpace`).

Shared by the Tune adapter (:mod:`lipsweep.sweep.searchers._optuna`) and the Ray-free member
(:mod:`lipsweep.search.searchers.optuna_member`). Imports Optuna when a sampler is built;
Ray-free.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from lipsweep.core.config_base import ConfigError
from lipsweep.search.protocol import SEED_KEY
from lipsweep.search.searchers._registry import SearchRequest
from lipsweep.search.space import normalise_trial
from lipsweep.search.space_distributions import SearchSpace, parse_space

_log = logging.getLogger(__name__)


class OptunaSpace:
    """Define-by-run space for Optuna over a ``search.space`` (see space_distributions.py).

    It draws through the same parsed
    :class:`~lipsweep.search.space_distributions.SearchSpace` as the random searcher (so both
    read the distribution syntax one way), and hands back the normalised flat config under
    ``trial`` (:func:`~lipsweep.search.space.normalise_trial`): the MLflow params and
    ``config.json`` are then the same settings under either searcher.
    """

    def __init__(
        self,
        fixed: dict[str, Any],
        space: SearchSpace | dict[str, Any],
        path: str = "search.space",
        normalise: bool = True,
    ) -> None:
        self.fixed = dict(fixed)
        self.space = space if isinstance(space, SearchSpace) else parse_space(space, path)
        self.normalise = normalise

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Tune's experiment state of a sweep started before the space was parsed holds the
        raw mapping: parse it on restore (``--resume``)."""
        self.__dict__.update(state)
        if not isinstance(self.space, SearchSpace):
            self.space = parse_space(self.space, "search.space")

    def __call__(self, trial: Any) -> dict[str, Any]:
        flat = {**self.fixed, **self.space.suggest(trial)}
        if not getattr(self, "normalise", True):  # a recorded table's settings, as they are
            return {"trial": flat}
        try:
            return {"trial": normalise_trial(flat)}
        except ConfigError as err:  # load_space checked 16 draws; this trial fails with it
            _log.warning("optuna drew an invalid trial: %s", err.format())
            return {"trial": flat}


def repeat_seeds(request: SearchRequest) -> list[Any]:
    """The seeds of ``request.repeats`` (``repeat: {seed: [...]}``), in order."""
    return [r[SEED_KEY] for r in request.repeats if SEED_KEY in r]


def request_space(request: SearchRequest) -> OptunaSpace:
    """The :class:`OptunaSpace` of ``request``: ``fixed`` (with the seed, when ``repeat``
    gives one: every draw runs it, as grid and random trials do) and ``space``."""
    seeds = repeat_seeds(request)
    fixed = dict(request.fixed)
    if len(seeds) == 1:
        fixed[SEED_KEY] = seeds[0]
    return OptunaSpace(fixed, request.space, normalise=request.normalise)


def _samplers() -> Any:
    import optuna

    return optuna.samplers


def _quiet(make: Callable[[], Any]) -> Any:
    """Build a sampler without Optuna's ExperimentalWarning (NSGA-III, TPE ``group``): the
    space chose it; the README says which samplers Optuna marks experimental."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return make()


def sampler_for(name: str, settings: Any) -> Any:
    """The Optuna sampler of searcher ``name`` (``optuna``: TPE for one objective, NSGA-II
    for several, the spelling spaces had first), seeded by ``settings.seed``."""
    samplers, seed = _samplers(), settings.seed
    if name == "optuna":
        several = len(settings.metric) > 1
        return samplers.NSGAIISampler(seed=seed) if several else samplers.TPESampler(seed=seed)
    if name == "optuna-tpe":
        return samplers.TPESampler(seed=seed)
    if name == "optuna-tpe-multivariate":  # TPE over the joint distribution, by branch
        return _quiet(lambda: samplers.TPESampler(seed=seed, multivariate=True, group=True))
    if name == "optuna-nsga2":
        return _nsga(samplers.NSGAIISampler, settings)
    if name == "optuna-nsga3":
        return _nsga(samplers.NSGAIIISampler, settings)
    if name == "optuna-gp":
        return samplers.GPSampler(seed=seed)
    raise KeyError(name)


def _nsga(cls: Callable[..., Any], settings: Any) -> Any:
    extra = (
        {} if settings.population_size is None else {"population_size": settings.population_size}
    )
    return _quiet(lambda: cls(seed=settings.seed, **extra))
