"""The searcher family's Ray side: the built-in members' factories, ``(settings,
SearchRequest) -> TunePlan`` (:mod:`lipsweep.sweep.searchers._basic`: grid and random;
:mod:`lipsweep.sweep.searchers._optuna`: Optuna through Tune). The family's index, the
settings and the study naming are Ray-free, in :mod:`lipsweep.search.searchers`."""

from __future__ import annotations

import importlib
from typing import Any

_OPTUNA = "lipsweep.sweep.searchers._optuna"


def __getattr__(name: str) -> Any:
    """``FinalResultOptuna`` and ``OptunaSpace`` at this address too (Tune's pickled
    experiment state may name them here), loaded by path as the registry loads its members."""
    if name in ("FinalResultOptuna", "OptunaSpace"):
        return getattr(importlib.import_module(_OPTUNA), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
