"""What each trial measures about its own smoothness (SPEC §2.1, 2.4, 2.5; paper Fig. 3, 4, 6).

Public API:

- :func:`jacobian_spectral_norm` (SPEC §3) and :func:`jacobian_norm_result`: ||J_f(x)||_2 of
  the logits w.r.t. the pixels, one value per sample, by the exact, Lanczos or power route.
- :func:`token_jacobian_spectral_norm` and :func:`token_jacobian_norm_result`: ||d f / d T||_2
  of the logits w.r.t. the token embeddings entering the first block (paper Fig. 4).
- :func:`softmax_jacobian_norm`, :func:`g1`, :func:`softmax_jacobian_stats`: exact norm of the
  softmax Jacobian M(p) = diag(p) - p p^T of every attention row and its bound g_1 (Thm 4).
- :func:`head_weights`, :func:`head_bounds_at`, :func:`head_exact_norm`,
  :func:`measure_head_bounds`:
  per-head local Lipschitz bounds (Thm 1-3) against the exact head Jacobian norm.
- :func:`lipschitz_summary` with :class:`LipschitzConfig`: the trial-level metrics, arrays and
  figures.
- The estimator registry: :func:`create_estimator`, :func:`list_estimators`,
  :func:`is_estimator`, :func:`register_estimator`.
"""
from __future__ import annotations

from lipsweep.lipschitz._registry import (Estimator, create_estimator, is_estimator,
                                          list_estimators, register_estimator)
from lipsweep.lipschitz.config import LipschitzConfig
from lipsweep.lipschitz.head_bounds import (BOUNDS, HeadLinearization, HeadWeights,
                                            head_bounds_at, head_exact_norm, head_forward,
                                            head_probs, head_weights, measure_head_bounds)
from lipsweep.lipschitz.jacobian import (EXACT_MAX_CLASSES, ROUTES, JacobianNormResult,
                                         jacobian_norm_result, jacobian_spectral_norm,
                                         resolve_route)
from lipsweep.lipschitz.softmax_jacobian import (g1, softmax_jacobian_matrix,
                                                 softmax_jacobian_norm, softmax_jacobian_stats,
                                                 softmax_ratio)
from lipsweep.lipschitz.token_jacobian import (token_jacobian_norm_result,
                                               token_jacobian_spectral_norm)
from lipsweep.lipschitz import estimators as _estimators  # noqa: F401  (registers them)
from lipsweep.lipschitz.summary import lipschitz_summary

__all__ = [
    "BOUNDS", "EXACT_MAX_CLASSES", "Estimator", "HeadLinearization", "HeadWeights",
    "JacobianNormResult", "LipschitzConfig", "ROUTES", "create_estimator", "g1",
    "head_bounds_at", "head_exact_norm", "head_forward", "head_probs", "head_weights",
    "is_estimator", "jacobian_norm_result", "jacobian_spectral_norm", "lipschitz_summary",
    "list_estimators", "measure_head_bounds", "register_estimator", "resolve_route",
    "softmax_jacobian_matrix", "softmax_jacobian_norm", "softmax_jacobian_stats",
    "softmax_ratio", "token_jacobian_norm_result", "token_jacobian_spectral_norm",
]
