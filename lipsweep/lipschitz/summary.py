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
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

from lipsweep.core.metric_names import (
    LIP_HEAD,
    LIP_JACOBIAN,
    LIP_JACOBIAN_MEDIAN,
    LIP_JACOBIAN_TOKENS,
    LIP_PREFIX,
    LIP_SOFTMAX,
    LIP_SOFTMAX_ROWS,
    LIP_STATS,
    lip_metric,
)
from lipsweep.lipschitz._registry import create_estimator
from lipsweep.lipschitz.config import LipschitzConfig
from lipsweep.lipschitz.jacobian import measurement_mode, resolve_route
from lipsweep.lipschitz.margin import jacobian_per_margin, logit_margin, per_margin_metrics
from lipsweep.lipschitz.softmax_jacobian import softmax_ratio

_log = logging.getLogger(__name__)

NPZ_NAME = "lipschitz.npz"
FIGURES = {
    "jacobian": "lipschitz_jacobian_hist.png",
    "tokens": "lipschitz_jacobian_tokens_hist.png",
    "softmax": "lipschitz_softmax_ratio.png",
    "heads": "lipschitz_head_bounds.png",
}
_HEAD_BOUNDS = ("thm1", "thm2", "thm3", "thm3_g1")
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


def _jacobian_metrics(
    v: np.ndarray, converged: np.ndarray, prefix: str = LIP_JACOBIAN
) -> dict[str, float]:
    stats = (np.mean(v), np.median(v), np.percentile(v, 90), np.percentile(v, 99), np.max(v))
    out = {lip_metric(prefix, s): float(x) for s, x in zip(LIP_STATS, stats)}
    out[lip_metric(prefix, "converged_frac")] = float(np.mean(converged))
    return out


def _margin_arrays(
    model: nn.Module, x: torch.Tensor, norms: np.ndarray, batch_size: int
) -> dict[str, np.ndarray]:
    """Per-image logit margin and ||J_f|| / margin (:mod:`lipsweep.lipschitz.margin`)."""
    with measurement_mode(model), torch.no_grad():
        margins = torch.cat(
            [
                logit_margin(model(x[i : i + batch_size]).float()).cpu()
                for i in range(0, x.shape[0], batch_size)
            ]
        )  # (B,)
    ratio = jacobian_per_margin(torch.from_numpy(norms), margins)
    return {"logit_margin": margins.numpy(), "jacobian_per_margin": ratio.numpy()}


def _softmax_metrics(norm: np.ndarray, g1: np.ndarray) -> dict[str, float]:
    ratio = softmax_ratio(torch.from_numpy(norm), torch.from_numpy(g1)).numpy()
    if ratio.size == 0:
        return {LIP_SOFTMAX_ROWS: 0.0}
    stats = {
        "ratio_mean": float(ratio.mean()),
        "ratio_median": float(np.median(ratio)),
        "ratio_p99": float(np.percentile(ratio, 99)),
        "ratio_max": float(ratio.max()),
        "ratio_min": float(ratio.min()),
        "norm_mean": float(norm.mean()),
        "norm_max": float(norm.max()),
        "g1_mean": float(g1.mean()),
        "rows": float(ratio.size),
    }
    return {lip_metric(LIP_SOFTMAX, k): v for k, v in stats.items()}


def _head_metrics(arr: dict[str, np.ndarray]) -> dict[str, float]:
    out: dict[str, float] = {}
    exact = arr["head_exact"]
    for name in ("exact",) + _HEAD_BOUNDS:
        v = arr[f"head_{name}"]
        out[lip_metric(LIP_HEAD, f"{name}_mean")] = float(v.mean())
        out[lip_metric(LIP_HEAD, f"{name}_max")] = float(v.max())
    for name in _HEAD_BOUNDS:
        ratio = arr[f"head_{name}"] / exact
        out[lip_metric(LIP_HEAD, f"{name}_ratio_min")] = float(ratio.min())
        out[lip_metric(LIP_HEAD, f"{name}_ratio_median")] = float(np.median(ratio))
    thm3_below = float(np.mean(arr["head_thm3"] < arr["head_thm2"]))
    out[lip_metric(LIP_HEAD, "thm3_below_thm2_frac")] = thm3_below
    # Thm 1 is the paper's statement, not a certified bound: how often it falls below exact
    out[lip_metric(LIP_HEAD, "thm1_below_exact_frac")] = float(np.mean(arr["head_thm1"] < exact))
    return out


def _save_npz(arrays: dict[str, np.ndarray], path: Path) -> None:
    """Write ``arrays`` once, atomically, the per-row ones as :data:`ROW_DTYPE`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = {k: v.astype(ROW_DTYPE) if k in ROW_ARRAYS else v for k, v in arrays.items()}
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **stored)
    os.replace(tmp, path)


def _write_figures(arrays: dict[str, np.ndarray], out_dir: Path) -> None:
    from lipsweep.lipschitz import figures

    if "jacobian_norm" in arrays:
        figures.plot_jacobian_histogram(arrays["jacobian_norm"], out_dir / FIGURES["jacobian"])
    if "token_jacobian_norm" in arrays:
        figures.plot_jacobian_histogram(
            arrays["token_jacobian_norm"], out_dir / FIGURES["tokens"], wrt="tokens"
        )
    if "softmax_norm" in arrays:
        ratio = softmax_ratio(
            torch.from_numpy(arrays["softmax_norm"]), torch.from_numpy(arrays["softmax_g1"])
        ).numpy()
        if ratio.size:
            figures.plot_softmax_ratio_histogram(ratio, out_dir / FIGURES["softmax"])
    if "head_exact" in arrays:
        figures.plot_head_bounds(arrays, out_dir / FIGURES["heads"])


def lipschitz_summary(
    model: nn.Module,
    x: torch.Tensor,
    cfg: LipschitzConfig,
    out_dir: Optional[Path] = None,
    progress: bool = False,
) -> dict[str, float]:
    """Measure the model's local Lipschitz behaviour on evaluation images ``x`` (B, 3, H, W).

    Runs the whole-network Jacobian norm w.r.t. pixels and (``lip_tokens``) token embeddings
    (``lip_images``), the softmax-Jacobian ratio
    (``lip_softmax_images``) and the per-head bounds (``lip_head_images``), returns the metrics
    listed in the module docstring, and writes the arrays and figures to ``out_dir`` if given.
    The model's train/eval modes and fused-attention flags are restored after.
    """
    if not isinstance(cfg, LipschitzConfig):
        raise ValueError(f"cfg must be a LipschitzConfig, got {type(cfg).__name__}")
    if not torch.is_tensor(x) or x.dim() < 2 or x.shape[0] == 0:
        raise ValueError("x must be a non-empty batch of images (B, 3, H, W)")
    x_jac = _first(x, cfg.lip_images)
    with measurement_mode(model), torch.no_grad():
        route = resolve_route(cfg.lip_route, model(x_jac[:1]).shape[-1])
    arrays: dict[str, np.ndarray] = {}
    est = create_estimator(
        f"jacobian_{route}", iters=cfg.lip_iters, tol=cfg.lip_tol, precision=cfg.lip_precision
    )
    arrays.update(_batched(est, model, x_jac, cfg.lip_batch_size, progress, "jacobian"))
    arrays["jacobian_route"] = np.array(route)
    metrics = _jacobian_metrics(arrays["jacobian_norm"], arrays["jacobian_converged"])
    _log.info("lipschitz: ||J_f|| route %s, median %.4g", route, metrics[LIP_JACOBIAN_MEDIAN])
    arrays.update(_margin_arrays(model, x_jac, arrays["jacobian_norm"], cfg.lip_batch_size))
    metrics.update(per_margin_metrics(arrays["jacobian_per_margin"]))
    if cfg.lip_tokens:
        est = create_estimator(
            "token_jacobian",
            route=route,
            iters=cfg.lip_iters,
            tol=cfg.lip_tol,
            precision=cfg.lip_precision,
        )
        arrays.update(_batched(est, model, x_jac, cfg.lip_batch_size, progress, "tokens"))
        metrics.update(
            _jacobian_metrics(
                arrays["token_jacobian_norm"],
                arrays["token_jacobian_converged"],
                LIP_JACOBIAN_TOKENS,
            )
        )
    if cfg.lip_softmax:
        est = create_estimator("softmax_jacobian", method=cfg.lip_softmax_method)
        arrays.update(
            _batched(
                est,
                model,
                _first(x_jac, cfg.lip_softmax_images),
                cfg.lip_batch_size,
                progress,
                "softmax",
            )
        )
        metrics.update(_softmax_metrics(arrays["softmax_norm"], arrays["softmax_g1"]))
    if cfg.lip_head_bounds:
        est = create_estimator(
            "head_bounds", route=cfg.lip_head_route, iters=cfg.lip_head_iters, tol=cfg.lip_head_tol
        )
        arrays.update(
            _batched(
                est,
                model,
                _first(x_jac, cfg.lip_head_images),
                cfg.lip_batch_size,
                progress,
                "head bounds",
            )
        )
        metrics.update(_head_metrics(arrays))
    for name in cfg.lip_estimators or ():
        est = create_estimator(name)
        extra = _batched(est, model, x_jac, cfg.lip_batch_size, progress, name)
        for out in est.outputs:
            arrays[f"{name}.{out}"] = extra[out]
            metrics[lip_metric(f"{LIP_PREFIX}{name}_{out}", "mean")] = float(
                np.mean(extra[out].astype(np.float64))
            )
    if out_dir is not None:
        out_dir = Path(out_dir)
        _save_npz(arrays, out_dir / NPZ_NAME)
        if cfg.lip_figures:
            _write_figures(arrays, out_dir)
    return metrics
