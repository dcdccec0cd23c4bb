"""The ``grid`` and ``random`` searchers: the trials drawn when the space was loaded, run by
Tune's BasicVariantGenerator as one ``grid_search`` axis (imports Ray)."""

from __future__ import annotations

from typing import Any

from lipsweep.search.searchers._registry import SearchRequest, TunePlan


def grid_plan(settings: Any, request: SearchRequest) -> TunePlan:
    """Every trial of ``request.trials`` once, in order."""
    from ray import tune

    return TunePlan(param_space={"trial": tune.grid_search(list(request.trials))})
