"""The trial-level Lipschitz summary: a flat dict of metrics, one npz of raw arrays, PNG figures.

Metrics (all floats; names start with ``lip_``):

- ``lip_jacobian_{mean,median,p90,p99,max}`` (docs/contract.md): distribution of ||J_f(x)||_2 over
the first ``lip_images`` images; ``lip_jacobian_converged_frac``: share of images whose
  iterative estimate met ``lip_tol`` (1 for the exact route).
- ``lip_jacobian_per_margin_{mean,median,p90}``: ||J_f(x)||_2 / (top logit - runner-up) per
  image (:mod:`lipsweep.lipschitz.margin`): the Lipschitz constant at the logits' own scale.
- ``lip_jacobian_tokens_{mean,median,p90,p99,max}`` and ``lip_jacobian_tokens_converged_frac``
  (with ``lip_tokens``): the same for ||d f / d T||_2, T the token embeddings entering the first
  block, on the same images and route. This is what the paper's Fig. 4 plots; the pixel one
  above is the threat model's (the attacks perturb pixels), which the paper does not plot.
- ``lip_softmax_ratio_{mean,median,p99,max,min}``: g_1(P_i) / ||M(P_i)||_2 over every layer,
  head, query row and image of the first ``lip_softmax_images`` (paper Fig. 3; the minimum is
  >= 1 by Thm 4); ``lip_softmax_norm_{mean,max}`` and ``lip_softmax_g1_mean``: the exact norm
  and the bound themselves; ``lip_softmax_rows``: rows counted (one-hot rows, 0/0, are left
  out).
- ``lip_head_{exact,thm1,thm2,thm3,thm3_g1}_{mean,max}``: per-head local Lipschitz constant
  and its bounds over images x layers x heads of the first ``lip_head_images`` (paper Fig. 6);
  ``lip_head_{thm1,thm2,thm3,thm3_g1}_ratio_{min,median}``: bound / exact per (image, layer,
  head), >= 1 wherever the bound holds. ``thm1`` is the paper's STATEMENT of Thm 1 (Hu et al.),
  not a certified bound: it is 0 at X = 0 where the exact norm is not (see head_bounds), so
  its ratio can fall below 1 (``lip_head_thm1_below_exact_frac`` counts how often); Thm 2 and
  Thm 3 are bounds on every input;
  ``lip_head_thm3_below_thm2_frac``: share of (image, layer, head) where Thm 3 is tighter
  than Thm 2 (the paper's Fig. 6 suggests always; it is not a theorem, see App. C).
- ``lip_<name>_<output>_mean`` for each estimator in ``lip_estimators`` (its arrays in the npz
  as ``<name>.<output>``).

Files in ``out_dir`` (when given): ``lipschitz.npz`` (every raw array, plus ``jacobian_route``;
the per-row softmax arrays in float32, see :data:`ROW_DTYPE`) and, with ``lip_figures``,
``lipschitz_jacobian_hist.png``, ``lipschitz_softmax_ratio.png``, ``lipschitz_head_bounds.png``.
Writes are atomic (temporary file, then rename).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

from lipsweep.core.metric_names import LIP_PREFIX, lip_metric
from lipsweep.lipschitz._registry import ESTIMATORS, create_estimator
from lipsweep.lipschitz.config import LipschitzConfig
from lipsweep.lipschitz.estimators import FIGURES  # noqa: F401  (the PNG names, read by tests)
from lipsweep.lipschitz.jacobian import measurement_mode

_log = logging.getLogger(__name__)

NPZ_NAME = "lipschitz.npz"
ROW_ARRAYS = ("softmax_norm", "softmax_g1")
"""Arrays with one value per (image, layer, head, query row): 9,360 per ViT-B image, so on a
10,000-image test split 94 M values per array (750 MB each in float64)."""
ROW_DTYPE = np.float32
"""Storage dtype of :data:`ROW_ARRAYS` in ``lipschitz.npz``: half of float64, and its 6e-8
relative rounding keeps g_1 / ||M||_2 >= 1 (Thm 4) visible to 1e-7. The metrics are computed
before the cast, in float64; per-image and per-head arrays stay float64 (10,000 values)."""


def _first(x: torch.Tensor, n: int) -> torch.Tensor:
    return x if n == 0 else x[:n]


def _batched(
    est: Callable, model: nn.Module, x: torch.Tensor, batch_size: int, progress: bool, what: str
) -> dict[str, np.ndarray]:
    """Run an estimator batch by batch and concatenate its per-sample arrays (on CPU)."""
    parts: dict[str, list[np.ndarray]] = {}
    for i in range(0, x.shape[0], batch_size):
        for k, v in est(model, x[i : i + batch_size]).items():
            parts.setdefault(k, []).append(v.detach().cpu().numpy())
        if progress:
            _log.info(
                "lipschitz %s: %d/%d images", what, min(i + batch_size, x.shape[0]), x.shape[0]
            )
    return {k: np.concatenate(v) for k, v in parts.items()}


def summary_parts(cfg: LipschitzConfig, num_classes: int) -> list[tuple[str, Any, int]]:
    """(name, estimator, images) of every part the summary runs under ``cfg``: the built-in
    members that take part (``for_summary``; in registration order, each deciding from
    ``cfg`` whether it runs), then ``lip_estimators`` with their default settings on
    ``lip_images``. ``images`` counts from the first of the ``lip_images`` (0: all)."""
    parts: list[tuple[str, Any, int]] = []
    for member in ESTIMATORS.entries():
        if not getattr(member.info.get("spec"), "summary", False):
            continue
        built = ESTIMATORS.load(member.name).for_summary(cfg, num_classes)
        if built is not None:
            est, images = built
            est.name = member.name
            parts.append((member.name, est, images))
    for name in cfg.lip_estimators or ():
        parts.append((name, create_estimator(name), 0))
    return parts


def _extra_metrics(name: str, outputs: tuple[str, ...], arrays: dict) -> dict[str, float]:
    """``lip_<name>_<output>_mean`` of an estimator named in ``lip_estimators``."""
    return {
        lip_metric(f"{LIP_PREFIX}{name}_{out}", "mean"): float(
            np.mean(arrays[f"{name}.{out}"].astype(np.float64))
        )
        for out in outputs
    }


def _save_npz(arrays: dict[str, np.ndarray], path: Path) -> None:
    """Write ``arrays`` once, atomically, the per-row ones as :data:`ROW_DTYPE`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = {k: v.astype(ROW_DTYPE) if k in ROW_ARRAYS else v for k, v in arrays.items()}
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **stored)
    os.replace(tmp, path)


def lipschitz_summary(
    model: nn.Module,
    x: torch.Tensor,
    cfg: LipschitzConfig,
    out_dir: Optional[Path] = None,
    progress: bool = False,
) -> dict[str, float]:
    """Measure the model's local Lipschitz behaviour on evaluation images ``x`` (B, 3, H, W).

    Runs every part :func:`summary_parts` names for ``cfg`` (the whole-network Jacobian norm
    w.r.t. pixels, and with the switches on: w.r.t. the token embeddings, the softmax-Jacobian
    ratio, the per-head bounds; then ``lip_estimators``), returns the metrics listed in the
    module docstring, and writes the arrays and figures to ``out_dir`` if given. The model's
    train/eval modes and fused-attention flags are restored after.
    """
    if not isinstance(cfg, LipschitzConfig):
        raise ValueError(f"cfg must be a LipschitzConfig, got {type(cfg).__name__}")
    if not torch.is_tensor(x) or x.dim() < 2 or x.shape[0] == 0:
        raise ValueError("x must be a non-empty batch of images (B, 3, H, W)")
    x_jac = _first(x, cfg.lip_images)
    with measurement_mode(model), torch.no_grad():
        num_classes = model(x_jac[:1]).shape[-1]
    arrays: dict[str, np.ndarray] = {}
    metrics: dict[str, float] = {}
    built_in = []
    for name, est, images in summary_parts(cfg, num_classes):
        got = _batched(est, model, _first(x_jac, images), cfg.lip_batch_size, progress, name)
        if hasattr(est, "summarize"):
            arrays.update(got)
            metrics.update(est.summarize(arrays))
            built_in.append(est)
        else:  # an estimator named in lip_estimators: its arrays as <name>.<output>
            arrays.update({f"{name}.{k}": v for k, v in got.items()})
            metrics.update(_extra_metrics(name, tuple(est.outputs), arrays))
    if out_dir is not None:
        out_dir = Path(out_dir)
        _save_npz(arrays, out_dir / NPZ_NAME)
        if cfg.lip_figures:
            for est in built_in:
                est.figures(arrays, out_dir)
    return metrics
