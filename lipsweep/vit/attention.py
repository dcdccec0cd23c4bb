"""Access to the queries and keys of every timm ViT attention block, without unfusing it.

timm's ``Attention`` runs ``F.scaled_dot_product_attention`` and never materialises the
attention map P = softmax(X A X^T) (docs/science.md §1). What it does expose is q and k, each
passing
through ``attn.q_norm`` / ``attn.k_norm`` (``nn.Identity`` unless qk_norm is on) just before the
fused kernel. A forward hook on those two modules therefore sees exactly the (post-norm) q and k
that the kernel consumes, with their autograd history, while the model's own forward stays the
fused path, untouched. Hooking ``q_norm``/``k_norm`` rather than subclassing ``Attention`` also
survives timm refactors of the module.

From q and k, the scores S = q k^T * scale (B, H, N, N) follow with one batched matmul, and the
rows of P are softmax(S) exactly; consumers (regularizers, the Lipschitz diagnostics) reduce them to
what they need.

Example::

    >>> with QKRecorder(model) as rec:
    ...     logits = model(x)
    >>> q, k, scale = rec.records[0]           # block 0: (B, H, N, d), (B, H, N, d), float
    >>> probs = attention_probs(q, k, scale)   # (B, H, N, N), rows sum to 1
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from lipsweep.vit.models import attention_modules


class QKRecorder:
    """Records (q, k, scale) of every attention block during a forward pass.

    Args:
        model: any module containing timm ``Attention`` blocks.
        active: optional predicate; when it returns False the hooks record nothing (for
            example ``lambda: model.training`` to skip evaluation forwards).

    ``records`` holds one ``(q, k, scale)`` per block, in block order, for the most recent
    forward; it is cleared at the start of each forward of the first block.
    """

    def __init__(self, model: nn.Module, active: Optional[Callable[[], bool]] = None) -> None:
        self.model = model
        self.active = active
        self.records: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        self._pending_q: dict[int, torch.Tensor] = {}
        self._handles: list = []
        self.attach()

    def attach(self) -> None:
        if self._handles:
            return
        blocks = list(attention_modules(self.model))
        if not blocks:
            raise ValueError("model has no timm Attention blocks to record")
        for idx, attn in enumerate(blocks):
            self._handles.append(attn.q_norm.register_forward_hook(self._q_hook(idx)))
            self._handles.append(attn.k_norm.register_forward_hook(self._k_hook(idx, attn.scale)))

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._pending_q.clear()

    def clear(self) -> None:
        self.records = []
        self._pending_q.clear()

    def _on(self) -> bool:
        return self.active is None or bool(self.active())

    def _q_hook(self, idx: int):
        def hook(_module: nn.Module, _inp, out: torch.Tensor) -> None:
            if not self._on():
                return
            if idx == 0:
                self.clear()
            self._pending_q[idx] = out

        return hook

    def _k_hook(self, idx: int, scale: float):
        def hook(_module: nn.Module, _inp, out: torch.Tensor) -> None:
            if not self._on():
                return
            q = self._pending_q.pop(idx, None)
            if q is not None:
                self.records.append((q, out, float(scale)))

        return hook

    def __enter__(self) -> "QKRecorder":
        self.attach()
        return self

    def __exit__(self, *exc) -> None:
        self.detach()


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Pre-softmax scores S = q k^T * scale. Shapes: (B, H, N, d) x2 -> (B, H, N, N)."""
    return (q * scale) @ k.transpose(-2, -1)


def attention_probs(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention map P = softmax(S) row-wise, in float32 at least. (B, H, N, N)."""
    s = attention_scores(q, k, scale)
    return (
        s.float().softmax(dim=-1)
        if s.dtype in (torch.float16, torch.bfloat16)
        else s.softmax(dim=-1)
    )


def set_fused_attention(model: nn.Module, enabled: bool) -> list[bool]:
    """Switch timm's fused SDPA path on/off for every block; returns the previous flags."""
    prev = []
    for attn in attention_modules(model):
        prev.append(bool(attn.fused_attn))
        attn.fused_attn = enabled
    return prev


def restore_fused_attention(model: nn.Module, flags: list[bool]) -> None:
    """Undo :func:`set_fused_attention` with the flags it returned."""
    for attn, flag in zip(attention_modules(model), flags):
        attn.fused_attn = flag
