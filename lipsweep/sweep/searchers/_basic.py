"""The ``grid`` and ``random`` searchers: the trials drawn when the space was loaded, run by
Tune's BasicVariantGenerator as one ``grid_search`` axis. The plan is Tune's spelling of that
axis (what ``ray.tune.grid_search`` returns), built without importing Ray, so the replay
benchmark runs these searchers without it."""

from __future__ import annotations

from typing import Any

from lipsweep.search.searchers._registry import SearchRequest, TunePlan


def grid_plan(settings: Any, request: SearchRequest) -> TunePlan:
    """Every trial of ``request.trials`` once, in order."""
    return TunePlan(param_space={"trial": {"grid_search": list(request.trials)}})
