"""The registered estimators: whole-network Jacobian norm (three routes) with respect to the
pixels and to the token embeddings, softmax Jacobian norms and bounds per attention row, and
per-head Lipschitz bounds against the exact norm.

Each built-in takes one argument, its settings: the trial's
:class:`~lipsweep.lipschitz.config.LipschitzConfig` (its defaults when omitted), where each
setting's default, bounds and help live once (``lip_iters``, ``lip_tol``, ...).

Each is also a part of the trial's summary (:func:`~lipsweep.lipschitz.summary.
lipschitz_summary` loops over them): ``for_summary(cfg, num_classes)`` builds it from the
trial's settings (None where they switch it off) with the number of images it takes,
``summarize(arrays)`` turns its arrays into the ``lip_*`` metrics (and may add derived
arrays), ``figures(arrays, out_dir)`` draws its PNGs.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch import nn

from lipsweep.core.metric_names import (
    LIP_HEAD,
    LIP_JACOBIAN,
    LIP_JACOBIAN_MEDIAN,
    LIP_JACOBIAN_TOKENS,
    LIP_SOFTMAX,
    LIP_SOFTMAX_ROWS,
    LIP_STATS,
    lip_metric,
)
from lipsweep.lipschitz._registry import register_estimator
from lipsweep.lipschitz.config import LipschitzConfig
from lipsweep.lipschitz.head_bounds import measure_head_bounds
from lipsweep.lipschitz.jacobian import jacobian_norm_result, resolve_route
from lipsweep.lipschitz.margin import jacobian_per_margin, per_margin_metrics
from lipsweep.lipschitz.softmax_jacobian import softmax_jacobian_stats, softmax_ratio
from lipsweep.lipschitz.token_jacobian import token_jacobian_norm_result

_log = logging.getLogger("lipsweep.lipschitz.summary")

FIGURES = {
    "jacobian": "lipschitz_jacobian_hist.png",
    "tokens": "lipschitz_jacobian_tokens_hist.png",
    "softmax": "lipschitz_softmax_ratio.png",
    "heads": "lipschitz_head_bounds.png",
}
"""The PNG each built-in part writes (with ``lip_figures``)."""


def _distribution_metrics(v: np.ndarray, converged: np.ndarray, prefix: str) -> dict[str, float]:
    """``<prefix>_{mean,median,p90,p99,max}`` and ``<prefix>_converged_frac``."""
    stats = (np.mean(v), np.median(v), np.percentile(v, 90), np.percentile(v, 99), np.max(v))
    out = {lip_metric(prefix, s): float(x) for s, x in zip(LIP_STATS, stats)}
    out[lip_metric(prefix, "converged_frac")] = float(np.mean(converged))
    return out


class JacobianNorm:
    """||J_f(x)||_2 per sample by a fixed route (docs/science.md §1.5): ``jacobian_norm`` (B,),
    ``jacobian_iterations`` (B,), ``jacobian_converged`` (B,) and the logit margin of the
    measurement's own forward, ``logit_margin`` (B,). In the summary: ``lip_jacobian_*`` and
    ``lip_jacobian_per_margin_*`` on ``lip_images``, by the route ``lip_route`` resolves to."""

    name = "jacobian"
    route = "exact"
    outputs = ("jacobian_norm", "jacobian_iterations", "jacobian_converged", "logit_margin")

    def __init__(self, settings: Optional[LipschitzConfig] = None) -> None:
        cfg = settings or LipschitzConfig()
        self.iters, self.tol, self.precision = cfg.lip_iters, cfg.lip_tol, cfg.lip_precision

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        res = jacobian_norm_result(
            model, x, self.iters, route=self.route, tol=self.tol, precision=self.precision
        )
        return {
            "jacobian_norm": res.values,
            "jacobian_iterations": res.iterations,
            "jacobian_converged": res.converged,
            "logit_margin": res.margins,
        }

    @classmethod
    def for_summary(
        cls, cfg: LipschitzConfig, num_classes: int
    ) -> Optional[tuple["JacobianNorm", int]]:
        if resolve_route(cfg.lip_route, num_classes) != cls.route:
            return None
        return cls(cfg), cfg.lip_images

    def summarize(self, arrays: dict[str, np.ndarray]) -> dict[str, float]:
        norms = arrays["jacobian_norm"]
        arrays["jacobian_route"] = np.array(self.route)
        ratio = jacobian_per_margin(
            torch.from_numpy(norms), torch.from_numpy(arrays["logit_margin"])
        )
        arrays["jacobian_per_margin"] = ratio.numpy()
        metrics = _distribution_metrics(norms, arrays["jacobian_converged"], LIP_JACOBIAN)
        metrics.update(per_margin_metrics(arrays["jacobian_per_margin"]))
        _log.info(
            "lipschitz: ||J_f|| route %s, median %.4g", self.route, metrics[LIP_JACOBIAN_MEDIAN]
        )
        return metrics

    def figures(self, arrays: dict[str, np.ndarray], out_dir: Path) -> None:
        from lipsweep.lipschitz import figures

        figures.plot_jacobian_histogram(arrays["jacobian_norm"], out_dir / FIGURES["jacobian"])


@register_estimator("jacobian_exact")
class JacobianExact(JacobianNorm):
    """:class:`JacobianNorm` by the exact route (C VJPs and the C x C Gram)."""

    route = "exact"


@register_estimator("jacobian_lanczos")
class JacobianLanczos(JacobianNorm):
    """:class:`JacobianNorm` by Lanczos on J J^T."""

    route = "lanczos"


@register_estimator("jacobian_power")
class JacobianPower(JacobianNorm):
    """:class:`JacobianNorm` by power iteration on J J^T (the paper's Fig. 4 method)."""

    route = "power"


@register_estimator("token_jacobian")
class TokenJacobianNorm:
    """||d f / d T||_2 per sample, T the tokens entering the first block (paper Fig. 4):
    ``token_jacobian_norm`` (B,), ``token_jacobian_iterations`` (B,) and
    ``token_jacobian_converged`` (B,). In the summary (``lip_tokens``): ``lip_jacobian_tokens_*``
    on ``lip_images``, by the pixel Jacobian's route."""

    name = "token_jacobian"
    outputs = ("token_jacobian_norm", "token_jacobian_iterations", "token_jacobian_converged")

    def __init__(self, settings: Optional[LipschitzConfig] = None) -> None:
        cfg = settings or LipschitzConfig()
        self.route, self.iters = cfg.lip_route, cfg.lip_iters
        self.tol, self.precision = cfg.lip_tol, cfg.lip_precision

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        res = token_jacobian_norm_result(
            model, x, self.iters, route=self.route, tol=self.tol, precision=self.precision
        )
        return {
            "token_jacobian_norm": res.values,
            "token_jacobian_iterations": res.iterations,
            "token_jacobian_converged": res.converged,
        }

    @classmethod
    def for_summary(
        cls, cfg: LipschitzConfig, num_classes: int
    ) -> Optional[tuple["TokenJacobianNorm", int]]:
        if not cfg.lip_tokens:
            return None
        route = resolve_route(cfg.lip_route, num_classes)
        return cls(dataclasses.replace(cfg, lip_route=route)), cfg.lip_images

    def summarize(self, arrays: dict[str, np.ndarray]) -> dict[str, float]:
        return _distribution_metrics(
            arrays["token_jacobian_norm"], arrays["token_jacobian_converged"], LIP_JACOBIAN_TOKENS
        )

    def figures(self, arrays: dict[str, np.ndarray], out_dir: Path) -> None:
        from lipsweep.lipschitz import figures

        figures.plot_jacobian_histogram(
            arrays["token_jacobian_norm"], out_dir / FIGURES["tokens"], wrt="tokens"
        )


@register_estimator("softmax_jacobian")
class SoftmaxJacobian:
    """Exact ||M(P_i)||_2 and g_1(P_i) of every layer, head and row (paper Fig. 3):
    ``softmax_norm`` and ``softmax_g1``, (B, L, H, N) float64. In the summary
    (``lip_softmax``): ``lip_softmax_*`` on ``lip_softmax_images``."""

    name = "softmax_jacobian"
    outputs = ("softmax_norm", "softmax_g1")

    def __init__(self, settings: Optional[LipschitzConfig] = None) -> None:
        self.method = (settings or LipschitzConfig()).lip_softmax_method

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return softmax_jacobian_stats(model, x, self.method)

    @classmethod
    def for_summary(
        cls, cfg: LipschitzConfig, num_classes: int
    ) -> Optional[tuple["SoftmaxJacobian", int]]:
        if not cfg.lip_softmax:
            return None
        return cls(cfg), cfg.lip_softmax_images

    def summarize(self, arrays: dict[str, np.ndarray]) -> dict[str, float]:
        norm, g1 = arrays["softmax_norm"], arrays["softmax_g1"]
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

    def figures(self, arrays: dict[str, np.ndarray], out_dir: Path) -> None:
        from lipsweep.lipschitz import figures

        ratio = softmax_ratio(
            torch.from_numpy(arrays["softmax_norm"]), torch.from_numpy(arrays["softmax_g1"])
        ).numpy()
        if ratio.size:
            figures.plot_softmax_ratio_histogram(ratio, out_dir / FIGURES["softmax"])


HEAD_BOUNDS = ("thm1", "thm2", "thm3", "thm3_g1")


@register_estimator("head_bounds")
class HeadBounds:
    """Exact per-head Jacobian norm and Thm 1-3 bounds (paper Fig. 6): ``head_exact``,
    ``head_thm1``, ``head_thm2``, ``head_thm3``, ``head_thm3_g1``, (B, L, H) float64. In the
    summary (``lip_head_bounds``): ``lip_head_*`` on ``lip_head_images``."""

    name = "head_bounds"
    outputs = ("head_exact", "head_thm1", "head_thm2", "head_thm3", "head_thm3_g1")

    def __init__(self, settings: Optional[LipschitzConfig] = None) -> None:
        cfg = settings or LipschitzConfig()
        self.route, self.iters, self.tol = cfg.lip_head_route, cfg.lip_head_iters, cfg.lip_head_tol

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return measure_head_bounds(model, x, self.route, self.iters, self.tol)

    @classmethod
    def for_summary(
        cls, cfg: LipschitzConfig, num_classes: int
    ) -> Optional[tuple["HeadBounds", int]]:
        if not cfg.lip_head_bounds:
            return None
        return cls(cfg), cfg.lip_head_images

    def summarize(self, arrays: dict[str, np.ndarray]) -> dict[str, float]:
        return head_metrics(arrays)

    def figures(self, arrays: dict[str, np.ndarray], out_dir: Path) -> None:
        from lipsweep.lipschitz import figures

        figures.plot_head_bounds(arrays, out_dir / FIGURES["heads"])


def head_metrics(arr: dict[str, np.ndarray]) -> dict[str, float]:
    """``lip_head_*`` of the per-head arrays: each bound's and the exact norm's mean and max,
    each bound's ratio to the exact norm (min, median), how often Thm 3 is tighter than Thm 2,
    and how often Thm 1 as stated falls below the exact norm (it is not a certified bound)."""
    out: dict[str, float] = {}
    exact = arr["head_exact"]
    for name in ("exact",) + HEAD_BOUNDS:
        v = arr[f"head_{name}"]
        out[lip_metric(LIP_HEAD, f"{name}_mean")] = float(v.mean())
        out[lip_metric(LIP_HEAD, f"{name}_max")] = float(v.max())
    for name in HEAD_BOUNDS:
        ratio = arr[f"head_{name}"] / exact
        out[lip_metric(LIP_HEAD, f"{name}_ratio_min")] = float(ratio.min())
        out[lip_metric(LIP_HEAD, f"{name}_ratio_median")] = float(np.median(ratio))
    out[lip_metric(LIP_HEAD, "thm3_below_thm2_frac")] = float(
        np.mean(arr["head_thm3"] < arr["head_thm2"])
    )
    out[lip_metric(LIP_HEAD, "thm1_below_exact_frac")] = float(np.mean(arr["head_thm1"] < exact))
    return out
