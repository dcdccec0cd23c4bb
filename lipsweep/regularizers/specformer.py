"""Specformer (Hu et al., ECCV 2024, cited as [16] in the JaSMin paper; docs/science.md §1.3).

Loss = L_cls + lam_q sum_{l,h} sigma_1(W_Q^{l,h})^2 + lam_k sum sigma_1(W_K^{l,h})^2
       + lam_v sum sigma_1(W_V^{l,h})^2,

with sigma_1 by power iteration on persistent vectors (``power_iters`` iterations per call of
:meth:`SpecformerRegularizer.terms`, i.e. per training step; the authors take one).

Head slicing: timm's fused ``qkv.weight`` is (3 H d, D) and its output feature
``which * H d + h d + j`` is component j of head h of q (which=0), k (1) or v (2). So head h's
W_Q is the row block ``h d:(h+1) d`` (then K at ``H d + h d``, V at ``2 H d + h d``), i.e.
``qkv.weight.view(3 H, d, D)[which * H + h]``. The authors' public code slices columns,
which mixes every head's rows into each "head"; we do not.

sigma_1 = u^T W v with u, v the (detached) power-iteration vectors, so d sigma_1 / dW = u v^T,
as in torch.nn.utils.spectral_norm. All in float32 with autocast off. Terms whose lambda is 0
are still reported (for logging) but computed without autograd.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from lipsweep.regularizers._registry import SpecformerSettings, register_regularizer
from lipsweep.regularizers.base import Regularizer

TERMS = ("spec_q", "spec_k", "spec_v")


def head_weights(attn: nn.Module) -> torch.Tensor:
    """The per-head projection matrices of a timm Attention: (3 H, d, D), a view.

    Index ``which * H + h`` (which = 0, 1, 2 for Q, K, V) is rows ``h d:(h+1) d`` of the
    q, k or v block of ``qkv.weight``.
    """
    qkv = getattr(attn, "qkv", None)
    if not isinstance(qkv, nn.Linear):
        raise ValueError(
            f"{type(attn).__name__} has no fused `qkv` Linear; Specformer expects timm's Attention"
        )
    h, d = attn.num_heads, attn.head_dim
    return qkv.weight.view(3 * h, d, qkv.weight.shape[1])


def _unit_or_keep(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """Rows of ``new`` scaled to unit norm; where a row is zero (W^T u = 0: the head's matrix
    was zero that step), the row of ``old`` instead, or a fixed unit vector if that is zero
    too. A zero vector would stay zero and its head would never be penalised again
    (F.normalize returns zero there). No host sync. (n, m) -> (n, m)."""
    norm = new.norm(dim=-1, keepdim=True)
    old_norm = old.norm(dim=-1, keepdim=True)
    fallback = torch.where(old_norm > 0, old, torch.full_like(old, old.shape[-1] ** -0.5))
    return torch.where(norm > 0, new / norm.clamp_min(torch.finfo(new.dtype).tiny), fallback)


@torch.no_grad()
def power_iteration_(w: torch.Tensor, u: torch.Tensor, v: torch.Tensor, iters: int) -> None:
    """``iters`` steps of v <- W^T u / |.|, u <- W v / |.| in place; a vector is never left at
    zero (:func:`_unit_or_keep`).

    Shapes: w (n, d, D), u (n, d), v (n, D).
    """
    for _ in range(iters):
        v.copy_(_unit_or_keep(torch.bmm(u.unsqueeze(1), w).squeeze(1), v))
        u.copy_(_unit_or_keep(torch.bmm(w, v.unsqueeze(-1)).squeeze(-1), u))


def spectral_norms(w: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """sigma_1 estimate u^T W v of each matrix, differentiable in w only. -> (n,)"""
    return torch.bmm(torch.bmm(u.unsqueeze(1), w), v.unsqueeze(-1)).view(-1)


@register_regularizer("specformer")
class SpecformerRegularizer(Regularizer):
    """Squared spectral norms of every head's W_Q, W_K, W_V; terms 'spec_q', 'spec_k', 'spec_v'.

    Its settings (lam_q, lam_k, lam_v, spec_power_iters) are a validated
    :class:`~lipsweep.regularizers._registry.SpecformerSettings`; ``seed`` seeds the power
    vectors.

    Example::

        >>> reg = SpecformerRegularizer(SpecformerSettings(lam_q=1e-2, lam_k=1e-2, lam_v=1e-2))
        >>> reg.attach(model)
        >>> terms = reg.terms()     # one power iteration, then sum_{l,h} sigma_1^2 per kind
    """

    settings: SpecformerSettings

    def __init__(self, settings: Optional[SpecformerSettings] = None, seed: int = 0) -> None:
        super().__init__(settings)
        cfg = self.settings
        self.lams = {
            "spec_q": float(cfg.lam_q),
            "spec_k": float(cfg.lam_k),
            "spec_v": float(cfg.lam_v),
        }
        self.power_iters = cfg.spec_power_iters
        self.seed = seed
        self._blocks: list[nn.Module] = []
        self._u = torch.empty(0)
        self._v = torch.empty(0)

    def attach(self, model: nn.Module) -> None:
        """Find the attention blocks and draw unit power vectors (seeded, own generator)."""
        from lipsweep.vit.models import attention_modules

        blocks = list(attention_modules(model))
        if not blocks:
            raise ValueError("model has no timm Attention blocks to regularize")
        shapes = {tuple(head_weights(a).shape) for a in blocks}
        if len(shapes) != 1:
            raise ValueError(f"attention blocks differ in head shapes {sorted(shapes)}")
        n, d, dim = shapes.pop()
        w = head_weights(blocks[0])
        gen = torch.Generator().manual_seed(self.seed)
        self._blocks = blocks
        self._u = F.normalize(torch.randn(len(blocks) * n, d, generator=gen), dim=-1).to(w.device)
        self._v = F.normalize(torch.randn(len(blocks) * n, dim, generator=gen), dim=-1).to(w.device)

    def detach(self) -> None:
        self._blocks = []

    def _check_attached(self) -> None:
        if not self._blocks:
            raise RuntimeError("SpecformerRegularizer used before attach(model)")

    def sigmas(self, iterate: bool = True) -> torch.Tensor:
        """(L, 3, H) sigma_1 estimates (Q, K, V rows); ``iterate`` runs power_iters first."""
        self._check_attached()
        with torch.autocast(self._u.device.type, enabled=False):
            w = torch.cat([head_weights(a) for a in self._blocks]).float()  # (L 3H, d, D)
            if self._u.device != w.device:  # the model moved after attach
                self._u, self._v = self._u.to(w.device), self._v.to(w.device)
            if iterate:
                power_iteration_(w.detach(), self._u, self._v, self.power_iters)
            sig = spectral_norms(w, self._u, self._v)
        return sig.view(len(self._blocks), 3, -1)

    def terms(self) -> dict[str, torch.Tensor]:
        """Runs ``power_iters`` power iterations, then {'spec_q', 'spec_k', 'spec_v'}."""
        sq = self.sigmas(iterate=True).square().sum(dim=(0, 2))  # (3,)
        return {
            name: (sq[i] if self.lams[name] > 0 else sq[i].detach()) for i, name in enumerate(TERMS)
        }

    @property
    def weights(self) -> dict[str, float]:
        return dict(self.lams)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Power vectors 'u' (L 3H, d) and 'v' (L 3H, D); rows in (layer, Q/K/V, head) order."""
        self._check_attached()
        return {"u": self._u.clone(), "v": self._v.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._check_attached()
        if set(state) != {"u", "v"}:
            raise ValueError(f"Specformer state keys must be ['u', 'v'], got {sorted(state)}")
        for name, dst in (("u", self._u), ("v", self._v)):
            if tuple(state[name].shape) != tuple(dst.shape):
                raise ValueError(
                    f"{name}: shape {tuple(state[name].shape)} does not match the "
                    f"attached model's {tuple(dst.shape)}"
                )
            dst.copy_(state[name])

    def __repr__(self) -> str:
        lam = self.lams
        return (
            f"SpecformerRegularizer(lam_q={lam['spec_q']}, lam_k={lam['spec_k']}, "
            f"lam_v={lam['spec_v']}, power_iters={self.power_iters})"
        )
