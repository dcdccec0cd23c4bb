"""The softmax Jacobian of every attention row, its exact norm and the bound g_1 (paper Thm 4,
Cor. 1, Fig. 3; docs/science.md §1.1).

For a probability row p (N entries), M(p) = diag(p) - p p^T is symmetric PSD and
||M(p)||_2 <= g_1(p) = p_(1) (1 - p_(1) + p_(2)) <= 1/2. Fig. 3 of the paper is the histogram
of g_1(P_i) / ||M(P_i)||_2 over layers, heads, query rows and images: >= 1 everywhere, close to 1.

Two exact routes for ||M(p)||_2 = lambda_max(M(p)):

- ``eigvalsh``: dense symmetric eigenvalues of the N x N matrix, batched (the reference).
- ``secular`` (default): M(p) is diag(p) minus a rank-one term, so its eigenvalues are the
  roots of 1 = sum_i p_i^2 / (p_i - lambda), and by Cauchy interlacing the top one lies in
  [p_(2), p_(1)]: a safeguarded Newton solve per row in float64, O(N) per step, 4-5 steps. It
  does not use Thm 4 (the bracket is the classical interlacing; g_1 is only the start point),
  so the measured g_1/||M|| ratio stays a test of the theorem. It agrees with ``eigvalsh`` to
  ~1e-14 (tests) and is much faster on 65-token rows (see benchmarks/bench_lipschitz.py),
  which is what makes the ratio affordable on a whole evaluation set.

Peaked rows need care in floating point: p_(1) rounds towards 1, so 1 - p_(1) is taken as the
sum of the other entries (exact identity for a probability row), in g_1 and in M(p) alike.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from lipsweep.vit.attention import QKRecorder, attention_probs

METHODS = ("secular", "eigvalsh")
"""Routes for :func:`softmax_jacobian_norm`."""

_NEWTON_STEPS = 60
"""Cap of safeguarded Newton steps (a bisection step at worst halves the bracket)."""
_REL_STEP = 1e-14
"""A row stops when its Newton step is below this, relative."""


def _top_split(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p_(1), p_(2), the row with its top entry zeroed, 1 - p_(1) summed from the others).

    1 - p_(1) is summed from the other entries instead of subtracted: on peaked rows p_(1)
    rounds towards 1 and the subtraction would lose every digit of the small complement.
    """
    vals, idx = p.topk(2, dim=-1)
    others = p.scatter(-1, idx[..., :1], 0.0)
    return vals[..., 0], vals[..., 1], others, others.sum(-1)


def softmax_jacobian_matrix(p: torch.Tensor) -> torch.Tensor:
    """M(p) = diag(p) - p p^T for each row of ``p`` (..., N) -> (..., N, N).

    The diagonal is written as p_i (1 - p_i), with the complement of the top entry summed from
    the other entries (see :func:`_top_split`), and never as -p_i^2 + (p_i (1 - p_i) + p_i^2):
    for the top entry of a peaked row that sum cancels and loses the small term (eigvalsh was
    19-60% low on such rows).
    """
    _, _, _, c1 = _top_split(p)
    comp = 1 - p
    top = p.argmax(-1, keepdim=True)
    comp = comp.scatter(-1, top, c1.unsqueeze(-1))
    m = -p.unsqueeze(-1) * p.unsqueeze(-2)
    torch.diagonal(m, dim1=-2, dim2=-1).copy_(p * comp)
    return m


def g1(p: torch.Tensor) -> torch.Tensor:
    """g_1(p) = p_(1) (1 - p_(1) + p_(2)) of each row (paper Def. 5). Shape (...).

    Local on purpose: ``lipsweep.regularizers.g_k(p, 1)`` currently rejects k = 1. The
    complement 1 - p_(1) is summed from the other entries (accurate on peaked rows).
    """
    p1, p2, _, c1 = _top_split(p)
    return p1 * (c1 + p2)


def softmax_jacobian_norm(p: torch.Tensor, method: str = "secular") -> torch.Tensor:
    """||M(p)||_2 of each probability row of ``p`` (..., N), in float64. Shape (...)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    if not torch.is_tensor(p) or p.dim() < 1 or p.shape[-1] < 2:
        raise ValueError("p must be a tensor of probability rows (..., N) with N >= 2")
    p = p.double()
    if method == "eigvalsh":
        return torch.linalg.eigvalsh(softmax_jacobian_matrix(p))[..., -1].clamp_min(0)
    return _secular_top(p)


def _secular_top(p: torch.Tensor) -> torch.Tensor:
    """Largest eigenvalue of diag(p) - p p^T per row, from its secular equation.

    With r(lam) = sum_{i != (1)} p_i^2 / (lam - p_i) (positive, decreasing for lam > p_(2)),
    the eigen-equation 1 = sum_i p_i^2 / (p_i - lam) is lam = p_(1) (c + r) / (1 + r), with
    c = 1 - p_(1). G(lam) = lam - p_(1) (c + r) / (1 + r) increases on (p_(2), p_(1)] from a
    negative value to a positive one: Newton on G inside the bracket (bisection when a step
    leaves it). A row leaves the working set once its step is below 1e-14 relative (4-5 steps
    on attention rows; the few rows whose root hugs p_(2) bisect on a small working set).

    Each row is solved in units of its p_(2) (lam' = lam / p_(2), r = p_(2) r'): on very peaked
    rows p_i^2 is subnormal or zero below p_(2) ~ 1e-154, and the unscaled equation was up to
    50% off there; scaled, every term is O(1) down to p_(2) ~ 1e-300.
    """
    p1, p2, others, c1 = _top_split(p)
    shape, n = p1.shape, p.shape[-1]
    p1, p2, c1, others = p1.reshape(-1), p2.reshape(-1), c1.reshape(-1), others.reshape(-1, n)
    # Closed forms: p_(1) = p_(2) gives lam = p_(1); p_(2) = 0 leaves the 1x1 block p1 (1 - p1).
    out = torch.where(p1 <= p2, p1, p1 * c1)
    idx = torch.nonzero((p1 > p2) & (p2 > 0)).squeeze(1)
    a1, unit, c = p1[idx], p2[idx], c1[idx]
    o = others[idx] / unit.unsqueeze(-1)  # scaled: the largest is 1
    lo, hi, cs, o2 = torch.ones_like(unit), a1 / unit, c / unit, o * o
    lam = a1 * (cs + lo)  # g_1 / p_(2): a start, not a bracket
    lam = torch.where((lam > lo) & (lam <= hi), lam, (lo + hi) / 2)
    for _ in range(_NEWTON_STEPS):
        inv = 1 / (lam.unsqueeze(-1) - o)  # zero entries add 0 below
        t = o2 * inv
        r, dr = t.sum(-1), -(t * inv).sum(-1)  # r' and dr'/dlam'
        big_g = lam - a1 * (cs + r) / (1 + unit * r)
        neg = big_g < 0
        lo, hi = torch.where(neg, lam, lo), torch.where(neg, hi, lam)
        newton = lam - big_g / (1 - a1 * a1 * dr / (1 + unit * r) ** 2)
        nxt = torch.where((newton > lo) & (newton <= hi), newton, (lo + hi) / 2)
        moving = (nxt - lam).abs() > _REL_STEP * lam.abs()
        lam = nxt
        if not bool(moving.all()):
            out[idx[~moving]] = lam[~moving] * unit[~moving]
            idx, a1, lo, hi, cs, o, o2, lam, unit = (
                v[moving] for v in (idx, a1, lo, hi, cs, o, o2, lam, unit)
            )
            if idx.numel() == 0:
                break
    out[idx] = lam * unit
    return out.reshape(shape)


def softmax_norms_from_qk(
    q: torch.Tensor, k: torch.Tensor, scale: float, method: str = "secular"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(||M(P_i)||_2, g_1(P_i)) of every row of one block's maps, from its q and k (B, H, N, d).

    P is recomputed in float64 from q and k, so both numbers describe the same rows.
    """
    p = attention_probs(q.detach().double(), k.detach().double(), scale)  # (B, H, N, N)
    return softmax_jacobian_norm(p, method), g1(p)


@torch.no_grad()
def softmax_jacobian_stats(
    model: nn.Module, x: torch.Tensor, method: str = "secular", batch_size: Optional[int] = None
) -> dict[str, torch.Tensor]:
    """Exact ||M(P_i)||_2 and g_1(P_i) for every image, layer, head and query row.

    Returns ``{"softmax_norm": (B, L, H, N), "softmax_g1": (B, L, H, N)}`` in float64. The
    model's mode is restored after (eval during the measurement).
    """
    from lipsweep.lipschitz.jacobian import measurement_mode

    if not torch.is_tensor(x) or x.dim() < 2 or x.shape[0] == 0:
        raise ValueError("x must be a non-empty batch tensor (B, ...)")
    step = batch_size or x.shape[0]
    norms, bounds = [], []
    with measurement_mode(model), QKRecorder(model) as rec:
        for i in range(0, x.shape[0], step):
            model(x[i : i + step])
            per_layer = [softmax_norms_from_qk(q, k, s, method) for q, k, s in rec.records]
            norms.append(torch.stack([n for n, _ in per_layer], 1))  # (b, L, H, N)
            bounds.append(torch.stack([g for _, g in per_layer], 1))
            rec.clear()
    return {"softmax_norm": torch.cat(norms), "softmax_g1": torch.cat(bounds)}


def softmax_ratio(norm: torch.Tensor, bound: torch.Tensor, floor: float = 1e-12) -> torch.Tensor:
    """g_1 / ||M||_2 over the rows where ||M||_2 > ``floor`` (one-hot rows have 0/0), flattened."""
    keep = norm > floor
    return (bound[keep] / norm[keep]).flatten()
