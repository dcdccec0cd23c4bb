"""JaSMin: Jacobian Softmax norm Minimization (paper Sec. 4, eqs. 8-9; docs/science.md §1.1-1.2).

For a probability vector p sorted descending, g_k(p) = p_(k) (1 - p_(k) + p_(k+1)) bounds the
k-th singular value of the softmax Jacobian M(p) = diag(p) - p p^T (Thm 4), so
||M(p)||_2 <= g_1(p) <= 1/2. The penalty over layers l, heads h and query rows i is

    k = 0:   L = sum_{l,h} mean_b AGG_i log(g_1(P_i) + eps)
    k >= 2:  L = sum_{l,h} mean_b AGG_i [log(g_1(P_i) + eps) - log(g_k(P_i) + eps)]

with AGG = max or mean over rows i and b the samples of the batch. ``eps`` = JASMIN_EPS = 1e-6
is the floor inside the log: the paper adds eps ~ 1e-6 to the denominator g_k (Appendix D);
we add it to g_1 as well, so the value and its gradient stay finite on one-hot rows
(g_1 = g_k = 0: a row gives log(eps) for k = 0 and 0 for k >= 2, where the paper's ratio would
give log 0) and |d log(g + eps)/dg| <= 1e6 everywhere. In float32, 1 - p_(1) has an absolute
error ~6e-8, below the floor.

Attention access (the fast path used in training). timm's fused attention never
materialises P, but p_(j) = exp(s_(j) - lse(s)) for the top k+1 scores s_(j) of a row.
:class:`JasminRegularizer` records each block's q and k with
:class:`~lipsweep.vit.attention.QKRecorder` (fused SDPA untouched) and feeds them to
:func:`~lipsweep.regularizers._ranked_softmax.ranked_softmax_probs`, a custom autograd
Function that recomputes S one layer at a time and keeps for backward only per-row
max score and sum (float32) and r <= 4 int32 positions (<= 24 bytes per row instead of 4N).

Why this design: it is cheaper in time and memory than plain autograd through softmax and
topk, than the same under torch.utils.checkpoint, than one call over the stacked layers, and
than torch.topk in place of the int-key selection; the figures, and what it holds at ViT-B
batch 512 instead of materialised maps, are in docs/benchmarks.md ("Why these designs").
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
from torch import nn

from lipsweep.core.config_base import check_choice, check_int
from lipsweep.regularizers._ranked_softmax import Workspace, ranked_softmax_probs
from lipsweep.regularizers._registry import (
    AGGREGATIONS,
    JasminSettings,
    check_jasmin_k,
    check_k_tokens,
    register_regularizer,
)
from lipsweep.regularizers.base import Regularizer

JASMIN_EPS = 1e-6
"""Floor inside the log of g_1 and g_k (paper Appendix D uses eps ~ 1e-6)."""


def _check_jasmin_k(k: object, num_keys: int) -> int:
    """k = 0 or 2 <= k <= N-1: the rules of the ``k`` setting (:mod:`._registry`)."""
    check_k_tokens(check_jasmin_k(k), num_keys)
    return k  # type: ignore[return-value]


def jasmin_ranks(k: int) -> tuple[int, ...]:
    """0-based ranks of the sorted row that the JaSMin_k term reads: (1, 2[, k, k+1])."""
    return (0, 1) if k == 0 else (0, 1, k - 1, k)


def _g_pair(pk: torch.Tensor, pk1: torch.Tensor) -> torch.Tensor:
    """g from the k-th and (k+1)-th largest probabilities: p_(k) (1 - p_(k) + p_(k+1))."""
    return pk * (1 - pk + pk1)


def g_k(p: torch.Tensor, k: Union[int, Sequence[int]]) -> torch.Tensor:
    """g_k(p) = p_(k) (1 - p_(k) + p_(k+1)) of each probability vector along the last dim.

    Paper Definition 5 / Thm 4; docs/science.md §1.1. Differentiable (through the sort).

    Args:
        p: (..., N) probability vectors (rows sum to 1).
        k: an int in [1, N-1], or a sequence (list, tuple, range, 1-D integer tensor) of them.

    Returns:
        (...) for an int k; (..., len(k)) for a sequence.
    """
    if not torch.is_tensor(p) or p.dim() < 1:
        raise ValueError("p must be a tensor of probability vectors along its last dim")
    n = p.shape[-1]
    single = isinstance(k, int) and not isinstance(k, bool)
    if torch.is_tensor(k) and k.dim() <= 1 and not k.is_floating_point():
        single, k = k.dim() == 0, k.tolist()
    ks = [k] if single else (list(k) if isinstance(k, (list, tuple, range)) else [])
    if not ks:
        raise ValueError(f"k must be an int or a non-empty sequence of ints, got {k!r}")
    for kk in ks:
        if not 1 <= check_int("k", kk) <= n - 1:
            raise ValueError(f"k must be in [1, N-1] = [1, {n - 1}], got {kk}")
    top = p.topk(max(ks) + 1, dim=-1).values  # (..., max_k+1), descending
    out = torch.stack([_g_pair(top[..., kk - 1], top[..., kk]) for kk in ks], -1)
    return out[..., 0] if single else out


def _log_ratio(ranked: torch.Tensor, k: int, eps: float) -> torch.Tensor:
    """Per-row log(g_1 + eps) [- log(g_k + eps)] from probabilities at jasmin_ranks(k)."""
    out = torch.log(_g_pair(ranked[..., 0], ranked[..., 1]) + eps)
    if k >= 2:
        out = out - torch.log(_g_pair(ranked[..., 2], ranked[..., 3]) + eps)
    return out  # ([L,] B, H, N)


def _aggregate(rows: torch.Tensor, aggregation: str) -> torch.Tensor:
    """AGG over query rows, mean over the batch, sum over heads (and layers).

    ([L,] B, H, N) -> scalar.
    """
    per = rows.amax(-1) if aggregation == "max" else rows.mean(-1)  # ([L,] B, H)
    return per.mean(-2).sum()


def _check_aggregation(aggregation: object) -> str:
    check_choice("aggregation", aggregation, AGGREGATIONS)
    return aggregation  # type: ignore[return-value]


def jasmin_penalty(
    attn: Union[torch.Tensor, Sequence[torch.Tensor]],
    k: int,
    aggregation: str,
    eps: float = JASMIN_EPS,
) -> torch.Tensor:
    """L_JaSMin (before lambda) from materialised attention maps (paper eqs. 8-9).

    Args:
        attn: one (B, H, N, N) tensor of row-stochastic attention maps, or a sequence of
            them (one per layer).
        k: 0 (penalise log g_1) or an integer in [2, N-1] (penalise log g_1/g_k).
        aggregation: 'max' or 'mean' over the query rows.
        eps: floor inside the log (see module docstring).

    Returns:
        A scalar tensor: summed over layers and heads, averaged over the batch.
    """
    maps = [attn] if torch.is_tensor(attn) else list(attn)
    if not maps:
        raise ValueError("attn must be a (B, H, N, N) tensor or a non-empty sequence of them")
    _check_aggregation(aggregation)
    total = None
    for a in maps:
        if not torch.is_tensor(a) or a.dim() != 4:
            raise ValueError(
                f"each attention map must be (B, H, N, N), got "
                f"{tuple(a.shape) if torch.is_tensor(a) else type(a)}"
            )
        _check_jasmin_k(k, a.shape[-1])
        a = a if a.dtype == torch.float64 else a.float()
        top = a.topk(max(jasmin_ranks(k)) + 1, dim=-1).values  # (B, H, N, k+1)
        ranked = top[..., list(jasmin_ranks(k))]
        term = _aggregate(_log_ratio(ranked, k, eps), aggregation)
        total = term if total is None else total + term
    return total


def jasmin_penalty_from_qk(
    records: Sequence[tuple[torch.Tensor, torch.Tensor, float]],
    k: int,
    aggregation: str,
    eps: float = JASMIN_EPS,
    workspace: Optional[Workspace] = None,
) -> torch.Tensor:
    """L_JaSMin from each layer's (q, k, scale), as recorded by QKRecorder (the fast path).

    Equal to ``jasmin_penalty([softmax(scale q k^T) per layer], k, aggregation)``, with
    gradients to q and k, without keeping any (B, H, N, N) tensor for backward.
    ``workspace`` (CPU scratch buffers) may be shared across calls.
    """
    if not records:
        raise ValueError("records is empty: no attention layer was recorded")
    _check_aggregation(aggregation)
    workspace = workspace or Workspace()
    ranked = []
    for q, kk, scale in records:
        _check_jasmin_k(k, kk.shape[-2])
        ranked.append(ranked_softmax_probs(q, kk, scale, jasmin_ranks(k), workspace))
    if len({r.shape for r in ranked}) == 1:  # one set of small ops for all layers
        return _aggregate(_log_ratio(torch.stack(ranked), k, eps), aggregation)
    return sum(_aggregate(_log_ratio(r, k, eps), aggregation) for r in ranked)


@register_regularizer("jasmin")
class JasminRegularizer(Regularizer):
    """JaSMin_k with weight ``lam`` (paper Sec. 4); term name ``'jasmin'``.

    Records q/k only in training forwards with grad enabled, so evaluation and attacks
    run the plain fused model. Its settings (k, lam, aggregation) are a validated
    :class:`~lipsweep.regularizers._registry.JasminSettings`.

    Example::

        >>> reg = JasminRegularizer(JasminSettings(k=10, lam=1e-2, aggregation="mean"))
        >>> reg.attach(model); model.train()
        >>> loss = F.cross_entropy(model(x), y) + reg.weights["jasmin"] * reg.terms()["jasmin"]
    """

    settings: JasminSettings

    def __init__(self, settings: Optional[JasminSettings] = None) -> None:
        super().__init__(settings)
        self.k, self.lam, self.eps = self.settings.k, float(self.settings.lam), JASMIN_EPS
        self.aggregation = self.settings.aggregation
        self._model: Optional[nn.Module] = None
        self._recorder = None
        self._workspace = Workspace()

    def attach(self, model: nn.Module) -> None:
        from lipsweep.vit.attention import QKRecorder

        self.detach()
        self._model = model
        self._recorder = QKRecorder(
            model, active=lambda: model.training and torch.is_grad_enabled()
        )

    def detach(self) -> None:
        if self._recorder is not None:
            self._recorder.detach()
            self._recorder.clear()
        self._recorder = None
        self._model = None
        self._workspace.clear()

    def terms(self) -> dict[str, torch.Tensor]:
        """{'jasmin': L_JaSMin} of the latest training forward; consumes the recorded q/k."""
        if self._recorder is None:
            raise RuntimeError("JasminRegularizer.terms() before attach(model)")
        records = self._recorder.records
        if not records:
            raise RuntimeError(
                "no training forward recorded since the last terms() call: "
                "call terms() once after model(x) in train mode with grad "
                "enabled"
            )
        self._recorder.clear()  # drop the references: q/k live on only in the autograd graph
        return {
            "jasmin": jasmin_penalty_from_qk(
                records, self.k, self.aggregation, self.eps, self._workspace
            )
        }

    @property
    def weights(self) -> dict[str, float]:
        return {"jasmin": self.lam}

    def __repr__(self) -> str:
        return f"JasminRegularizer(k={self.k}, lam={self.lam}, aggregation={self.aggregation!r})"
