"""Searchers: which trial configs a sweep runs (``search.algorithm``), one registry entry each.

The light index: every built-in is declared here with its settings and facts, and its
implementation is imported on :func:`create_searcher` (Ray, Optuna), so loading a space and
``--dry-run`` import neither. ``list_searchers()``::

    grid                     the ``grid:`` blocks (crossed with ``repeat``), in order
    random                   ``num_samples`` random draws of ``search.space``, made at load
    optuna                   TPE for one objective, NSGA-II for several (the first spelling)
    optuna-tpe               TPE (Bergstra et al. 2011; Ozaki et al. 2022 for several objectives)
    optuna-tpe-multivariate  TPE over the joint distribution (``multivariate``, ``group``)
    optuna-nsga2             NSGA-II (Deb et al. 2002); ``population_size``
    optuna-nsga3             NSGA-III (Deb & Jain 2014); ``population_size``
    optuna-gp                Gaussian-process Bayesian optimisation (Optuna's GPSampler)

A new searcher is one file: a factory ``(settings, SearchRequest) -> TunePlan`` decorated
with ``@register_searcher(name, settings=..., info=SearcherInfo(...))`` that imports Ray or
Optuna inside (the built-ins' are in :mod:`lipsweep.sweep.searchers`), plus, for a built-in,
its settings in :mod:`lipsweep.search.searchers.settings` and one ``declare_searcher`` line
below, naming the factory by import path (so this package imports no Ray). A searcher that
runs without Ray names a second factory, ``(settings, SearchRequest) -> member`` of
:mod:`lipsweep.search.protocol`, in ``SearcherInfo(member="module:factory")``:
``bench-search`` replays it with no Ray (the Optuna searchers' factories are in
:mod:`lipsweep.search.searchers.optuna_member`); one that names none is replayed through its
plan's Tune ``Searcher``.
"""

from __future__ import annotations

from lipsweep.search.searchers._registry import (
    SEARCHERS,
    GridSettings,
    SearcherInfo,
    SearchRequest,
    SearchSettings,
    TunePlan,
    all_settings_keys,
    create_member,
    create_searcher,
    declare_searcher,
    is_searcher,
    list_searchers,
    register_searcher,
    searcher_entry,
    searcher_info,
    searcher_settings,
    settings_keys,
    unregister_searcher,
)
from lipsweep.search.searchers.settings import NSGASettings, OptunaSettings, RandomSettings

__all__ = [
    "SEARCHERS",
    "GridSettings",
    "NSGASettings",
    "OptunaSettings",
    "RandomSettings",
    "SearchRequest",
    "SearchSettings",
    "SearcherInfo",
    "TunePlan",
    "all_settings_keys",
    "create_member",
    "create_searcher",
    "declare_searcher",
    "is_searcher",
    "list_searchers",
    "register_searcher",
    "searcher_entry",
    "searcher_info",
    "searcher_settings",
    "settings_keys",
    "unregister_searcher",
]

_BASIC = "lipsweep.sweep.searchers._basic"
_OPTUNA = "lipsweep.sweep.searchers._optuna"
_MEMBER = "lipsweep.search.searchers.optuna_member"
_LEARNS = {"lazy": True, "objectives": True, "study": True}

declare_searcher(
    "grid",
    f"{_BASIC}:grid_plan",
    GridSettings,
    SearcherInfo(sampled=False, summary="the grid: blocks, in order"),
)
declare_searcher(
    "random",
    f"{_BASIC}:grid_plan",  # the draws are made at load: Tune runs them as a grid
    RandomSettings,
    SearcherInfo(summary="num_samples random draws of search.space, made at load"),
)
for _name, _settings, _summary in (
    ("optuna", OptunaSettings, "TPE for one objective, NSGA-II for several"),
    ("optuna-tpe", OptunaSettings, "Optuna TPESampler"),
    ("optuna-tpe-multivariate", OptunaSettings, "TPE, multivariate and grouped"),
    ("optuna-nsga2", NSGASettings, "Optuna NSGAIISampler"),
    ("optuna-nsga3", NSGASettings, "Optuna NSGAIIISampler"),
    ("optuna-gp", OptunaSettings, "Optuna GPSampler"),
):  # one plan and one member for all: each reads its sampler from request.algorithm
    declare_searcher(
        _name,
        f"{_OPTUNA}:optuna_plan",
        _settings,
        SearcherInfo(summary=_summary, member=f"{_MEMBER}:optuna_member", **_LEARNS),
    )

# Installed plugins add searchers too, read on the family's first use (core/registry.py).
SEARCHERS.use_entry_points("lipsweep.searchers")
