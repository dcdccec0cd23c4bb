"""What each trial measures about its own smoothness (docs/science.md §1.1, 1.4, 1.5; paper Fig. 3,
4, 6).

Public API:

- :func:`jacobian_spectral_norm` (docs/contract.md) and :func:`jacobian_norm_result`: ||J_f(x)||_2
  of the logits w.r.t. the pixels, one value per sample, by the exact, Lanczos or power route.
- :func:`token_jacobian_spectral_norm` and :func:`token_jacobian_norm_result`: ||d f / d T||_2
  of the logits w.r.t. the token embeddings entering the first block (paper Fig. 4).
- :func:`softmax_jacobian_norm`, :func:`g1`, :func:`softmax_jacobian_stats`: exact norm of the
  softmax Jacobian M(p) = diag(p) - p p^T of every attention row and its bound g_1 (Thm 4).
- :func:`head_weights`, :func:`head_bounds_at`, :func:`head_exact_norm`,
  :func:`measure_head_bounds`:
  per-head local Lipschitz bounds (Thm 1-3) against the exact head Jacobian norm.
- :func:`lipschitz_summary` with :class:`LipschitzConfig`: the trial-level metrics, arrays and
  figures.
- The estimator family (torch-free index): :func:`create_estimator`, :func:`list_estimators`,
  :func:`is_estimator`, :func:`register_estimator`, :func:`estimator_outputs`.
"""

from __future__ import annotations

import importlib
from typing import Any

from lipsweep.lipschitz._registry import (
    ESTIMATORS,
    Estimator,
    create_estimator,
    estimator_outputs,
    is_estimator,
    list_estimators,
    register_estimator,
    unregister_estimator,
)
from lipsweep.lipschitz.config import LipschitzConfig

# PEP 562: the torch-backed names load on first use, so a config (and `lipsweep sweep
# --dry-run`) validates without importing torch. The first one loads every module below.
_MODULES = {
    "head_bounds": (
        "BOUNDS",
        "HeadLinearization",
        "HeadWeights",
        "head_bounds_at",
        "head_exact_norm",
        "head_forward",
        "head_probs",
        "head_weights",
        "measure_head_bounds",
    ),
    "jacobian": (
        "EXACT_MAX_CLASSES",
        "ROUTES",
        "JacobianNormResult",
        "jacobian_norm_result",
        "jacobian_spectral_norm",
        "resolve_route",
    ),
    "softmax_jacobian": (
        "g1",
        "softmax_jacobian_matrix",
        "softmax_jacobian_norm",
        "softmax_jacobian_stats",
        "softmax_ratio",
    ),
    "token_jacobian": ("token_jacobian_norm_result", "token_jacobian_spectral_norm"),
    "summary": ("lipschitz_summary",),
}
_LAZY = {name: mod for mod, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for mod, names in _MODULES.items():
        module = importlib.import_module(f"{__name__}.{mod}")
        globals().update({n: getattr(module, n) for n in names})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BOUNDS",
    "ESTIMATORS",
    "EXACT_MAX_CLASSES",
    "Estimator",
    "HeadLinearization",
    "HeadWeights",
    "JacobianNormResult",
    "LipschitzConfig",
    "ROUTES",
    "create_estimator",
    "estimator_outputs",
    "g1",
    "head_bounds_at",
    "head_exact_norm",
    "head_forward",
    "head_probs",
    "head_weights",
    "is_estimator",
    "jacobian_norm_result",
    "jacobian_spectral_norm",
    "lipschitz_summary",
    "list_estimators",
    "measure_head_bounds",
    "register_estimator",
    "resolve_route",
    "softmax_jacobian_matrix",
    "softmax_jacobian_norm",
    "softmax_jacobian_stats",
    "softmax_ratio",
    "token_jacobian_norm_result",
    "token_jacobian_spectral_norm",
    "unregister_estimator",
]

# Installed plugins add estimators too, read on the family's first use (core/registry.py).
ESTIMATORS.use_entry_points("lipsweep.estimators")
