"""||J_f(x)||_2 normalised by the logit margin, so "lower Lipschitz" cannot mean "smaller logits".

Scaling the logits by c > 0 scales ||J_f(x)||_2 (docs/science.md §1.5, paper Fig. 4) by c and leaves
the prediction unchanged, so a regularizer could lower ||J_f|| by shrinking the logits alone. The
margin m(x) = f_(1)(x) - f_(2)(x) (top logit minus the runner-up) scales by the same c, so the
ratio r(x) = ||J_f(x)||_2 / m(x) is scale-free. To first order, a perturbation must have an L2
norm of at least m(x) / (sqrt(2) ||J_f(x)||_2) to change the prediction (the margin difference
f_(1) - f_(2) has gradient norm <= sqrt(2) ||J_f||), so 1 / r is a local robustness radius
up to sqrt(2).

    >>> logits = torch.tensor([[3.0, 1.0, 0.5]])        # margin 2
    >>> jacobian_per_margin(torch.tensor([4.0]), logit_margin(logits))
    tensor([2.])
"""

from __future__ import annotations

import numpy as np
import torch

from lipsweep.core.metric_names import LIP_PER_MARGIN, lip_metric

MARGIN_FLOOR = 1e-12
"""Floor on the margin (a tie, m = 0, would divide by zero): keeps every ratio finite."""


def logit_margin(logits: torch.Tensor) -> torch.Tensor:
    """Top logit minus the second one, per row: (B, C) -> (B,), >= 0. Needs C >= 2."""
    if logits.dim() != 2 or logits.shape[1] < 2:
        raise ValueError(f"logits must be (B, C) with C >= 2, got {tuple(logits.shape)}")
    top2 = logits.topk(2, dim=1).values  # (B, 2)
    return top2[:, 0] - top2[:, 1]


def jacobian_per_margin(norms: torch.Tensor, margins: torch.Tensor) -> torch.Tensor:
    """r(x) = ||J_f(x)||_2 / max(m(x), MARGIN_FLOOR), per sample, in float64: (B,), (B,) -> (B,)."""
    if norms.shape != margins.shape:
        raise ValueError(f"norms {tuple(norms.shape)} and margins {tuple(margins.shape)} differ")
    return norms.double() / margins.double().clamp_min(MARGIN_FLOOR)


def per_margin_metrics(ratio: np.ndarray) -> dict[str, float]:
    """``lip_jacobian_per_margin_{mean,median,p90}`` of the per-sample ratios."""
    return {
        lip_metric(LIP_PER_MARGIN, "mean"): float(np.mean(ratio)),
        lip_metric(LIP_PER_MARGIN, "median"): float(np.median(ratio)),
        lip_metric(LIP_PER_MARGIN, "p90"): float(np.percentile(ratio, 90)),
    }
