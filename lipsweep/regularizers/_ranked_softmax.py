"""Ranked attention probabilities p_(r) straight from q and k, without keeping P for backward.

JaSMin (docs/science.md §1.2) needs, per attention row, only a few order statistics of the row's
probabilities: p_(1), p_(2) (and p_(k), p_(k+1) for k >= 2). With scores S = scale * q k^T,
row max m and Z = sum_j exp(s_j - m), p_(j) = exp(s_(j) - m) / Z exactly, so the (B, H, N, N)
map is needed only transiently. :class:`_RankedSoftmax` computes the ranked probabilities
in one pass and saves for backward only what autograd already holds (q and k: the fused
attention kernel saves them too) plus per row the max score m and the sum Z (float32) and
r <= 4 int32 positions; the backward recomputes S for one layer at a time and p = exp(s - m) / Z
from them, as the forward did (not from a rounded log-sum-exp: see :func:`_dense_backward`).

Gradient (p = softmax(s), y_r = p at the position i_r of rank r, G_r = dL/dy_r)::

    dL/ds_m = sum_r G_r y_r [m == i_r] - p_m sum_r G_r y_r

which is exactly what autograd through ``softmax(s).topk(...)`` gives for the same positions
(tests compare both and run gradcheck in float64).

No host syncs: nothing here reads a tensor on the host or makes a shape depend on
data, so a CUDA step never waits for the device. The backward is therefore always dense (all
rows, whichever received gradient): a row-sparse backward for max aggregation, which has
gradient in about one row per (sample, head), needed ``nonzero`` (a sync) and data-dependent
shapes; the dense backward costs a few percent of a step (docs/benchmarks.md, "Why these
designs").

Selection. ``torch.topk`` of a few out of N costs, on CPU, about as much as all the rest of
this forward and backward (docs/benchmarks.md, "Why these designs"). On CPU in float32
the rows of E = exp(S - m) >= 0 are therefore ranked through int64 keys
``bits(double(E)) | j`` (the IEEE bits of a non-negative double order like the double, and a
float32 widened to double has 29 zero low bits, where the column j goes: keys are unique, so
ties get distinct positions), taking ``amax`` r times and knocking the winner out through
its flat index: one vectorised pass per rank.
Elsewhere (CUDA, float64) ``topk`` on E is used. Both rank p itself, as the paper does.

On CUDA (float32, bfloat16, float16; N <= 128, head dim <= 64) the whole forward and backward
run instead in the fused Triton kernels of :mod:`._ranked_softmax_triton`: the same values and
the same backward formula, with S kept in registers (on an H100 a JaSMin step went from 1.95x
to 1.26x the baseline; docs/benchmarks.md, "JaSMin on the GPU").
"""

from __future__ import annotations

import itertools
import math
from typing import Optional, Sequence

import torch
from torch.autograd.function import once_differentiable

from lipsweep.regularizers import _ranked_softmax_triton as _triton

_CPU_INT_KEYS = True
"""Rank float32 CPU rows through int64 keys (False: torch.topk everywhere; for benchmarks)."""

_FUSED = True
"""Use the fused Triton kernels (:mod:`._ranked_softmax_triton`) where they apply (CUDA);
False: the unfused torch path everywhere (for benchmarks and tests)."""

_SELECT = "auto"
"""How rows are ranked: 'auto' (int64 keys for float32 CPU rows, else ``topk``), or one of
'topk', 'sort', 'keys' everywhere (benchmarks/bench_jasmin_cuda.py compares them on a GPU)."""


def _fused(q: torch.Tensor) -> bool:
    return _FUSED and _triton.applies(q)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


class Workspace:
    """Scratch buffers reused across layers and steps (CPU only; CUDA has its own cache).

    A fresh multi-MB CPU tensor page-faults on first touch; on the tiny ViT that cost as
    much as the arithmetic. Buffers never escape a forward or backward call, so one
    workspace serves every layer in turn. :class:`JasminRegularizer` owns one.
    """

    def __init__(self) -> None:
        self._bufs: dict[tuple, torch.Tensor] = {}

    def take(
        self, name: str, shape: Sequence[int], dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """An uninitialised contiguous tensor of ``shape``, reusing memory across calls."""
        if device.type != "cpu":
            return torch.empty(shape, dtype=dtype, device=device)
        numel = math.prod(shape)
        buf = self._bufs.get((name, dtype))
        if buf is None or buf.numel() < numel:
            buf = self._bufs[(name, dtype)] = torch.empty(numel, dtype=dtype)
        return buf[:numel].view(shape)

    def clear(self) -> None:
        self._bufs.clear()


def _top_positions(e: torch.Tensor, ranks: tuple[int, ...], ws: Workspace) -> torch.Tensor:
    """Distinct positions of the entries of rank ``ranks`` (0-based, descending) in each row of
    ``e`` >= 0. (..., N, N) -> (..., N, len(ranks)) int64.

    Only the ranks asked for are kept (JaSMin_k reads 4 of its k + 1), and the entry of the
    last rank is not knocked out: nothing is ranked after it.
    """
    n, m = e.shape[-1], max(ranks) + 1
    select = _SELECT
    if select == "auto":
        cpu_keys = _CPU_INT_KEYS and e.device.type == "cpu" and e.dtype == torch.float32
        select = "keys" if cpu_keys else "topk"
    if select == "keys" and (e.dtype != torch.float32 or n > 2**29):
        select = "topk"
    if select == "topk":
        return _take_ranks(e.topk(m, dim=-1).indices, ranks)
    if select == "sort":
        return _take_ranks(e.sort(dim=-1, descending=True).indices[..., :m], ranks)
    # float32 -> float64 is exact and leaves the low 29 mantissa bits 0; the bits of a
    # non-negative double order like the double, so OR-ing the column in keeps the order of
    # distinct values and breaks ties by column.
    dev = e.device
    key = ws.take("key", e.shape, torch.float64, dev).copy_(e).view(torch.int64)
    key.bitwise_or_(torch.arange(n, device=dev))
    low = (1 << max(1, (n - 1).bit_length())) - 1
    flat = key.view(-1)
    offsets = torch.arange(0, key.numel(), n, device=dev).view(key.shape[:-1] + (1,))
    out = torch.empty(key.shape[:-1] + (len(ranks),), dtype=torch.int64, device=dev)
    for j in range(m):
        pos = key.amax(dim=-1, keepdim=True).bitwise_and_(low)  # (..., N, 1)
        for col, r in enumerate(ranks):
            if r == j:
                out[..., col : col + 1] = pos
        if j < m - 1:
            flat.index_fill_(0, (pos + offsets).view(-1), -1)  # keys are >= 0
    return out


def _operands(
    q: torch.Tensor, k: torch.Tensor, scale: float, dtype: torch.dtype, ws: Workspace
) -> tuple[torch.Tensor, torch.Tensor]:
    """(G, N, d) contiguous copies of scale * q and k in ``dtype`` (G = prod of lead dims)."""
    n, d = q.shape[-2:]
    qs = ws.take("q", q.shape, dtype, q.device).copy_(q).mul_(scale)
    kc = ws.take("k", k.shape, dtype, k.device).copy_(k)
    return qs.view(-1, n, d), kc.view(-1, n, d)


def _scores(qs: torch.Tensor, kc: torch.Tensor, ws: Workspace) -> torch.Tensor:
    """S = (scale q) k^T into the workspace. (G, N, d) x2 -> (G, N, N)."""
    g, n, _ = qs.shape
    return torch.bmm(qs, kc.transpose(1, 2), out=ws.take("s", (g, n, n), qs.dtype, qs.device))


def _dense_backward(
    qs: torch.Tensor,
    kc: torch.Tensor,
    scale: float,
    mx: torch.Tensor,
    z: torch.Tensor,
    pos: torch.Tensor,
    ranks: tuple[int, ...],
    grad: torch.Tensor,
    ws: Workspace,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All arguments flattened to (G, N, .). Returns dL/dq, dL/dk as (G, N, d).

    p = e / z with e = exp(s - mx), as the forward formed it (and as ``torch.softmax`` does):
    the top entry's e is exp(0) = 1, so its p is 1 / z rounded once, the value the forward
    returned. On a peaked row the upstream gradient of the top entry is large (~1 / (1 - p_(1))
    from g_1 in float32) and its dL/ds is that times p (1 - p): computed as
    c - p * sum(c) it would round at the size of c, so each selected entry is formed as
    own (1 - p) - p * others from the same rounded p as the forward's (1 - p_(1)), which
    cancels as autograd through softmax does. exp(s - lse) with lse = mx + log z rounded to
    float32 carried ulp(mx) / 2 in the exponent and made the gradient 10-40 times noisier than
    autograd on peaked rows. 1 / z is folded into the per-row factors: no extra
    (G, N, N) pass.
    """
    e = _scores(qs, kc, ws).sub_(mx).exp_()  # (G, N, N), p = e / z
    inv_z = z.reciprocal()  # (G, N, 1): the top entry's p, as the forward rounded it
    y = e.gather(-1, pos).mul_(inv_z)  # (G, N, r): the forward's probabilities
    c = grad * y  # G_r y_r
    ds = e.mul_(c.sum(-1, keepdim=True).mul_(inv_z).neg_())  # -p * sum_r c_r: unselected
    # Selected entries: own (1 - y) - y * others, never c - y * sum(c) (see docstring).
    # Distinct ranks sit at distinct positions, so which columns share one is static (built
    # on the device from eye and fills: no host-to-device copy, see the module docstring).
    same = torch.eye(len(ranks), dtype=c.dtype, device=c.device)  # (r, r)
    for i, j in itertools.permutations(range(len(ranks)), 2):
        if ranks[i] == ranks[j]:
            same[i, j] = 1.0
    own, others = c @ same, c @ (1 - same)  # (G, N, r): c summed at / off this position
    ds.scatter_(-1, pos, own.mul_(1 - y).sub_(others.mul_(y)))  # dL/dS
    dq = torch.bmm(ds, kc).mul_(scale)  # (G, N, d)
    dk = torch.bmm(ds.transpose(1, 2), qs)  # scale is in qs
    return dq, dk


def _take_ranks(top: torch.Tensor, ranks: tuple[int, ...]) -> torch.Tensor:
    """Columns ``ranks`` of ``top`` (..., m) by slicing: no index tensor to copy to the device."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([r, r + 1])
    parts = [top[..., lo:hi] for lo, hi in runs]
    return parts[0] if len(parts) == 1 else torch.cat(parts, -1)


class _RankedSoftmax(torch.autograd.Function):
    """(q, k, scale, ranks, ws) -> softmax(scale q k^T) at the given 0-based ranks, (..., N, r)."""

    @staticmethod
    def forward(
        ctx, q: torch.Tensor, k: torch.Tensor, scale: float, ranks: tuple[int, ...], ws: Workspace
    ) -> torch.Tensor:
        dtype, (n, r) = _compute_dtype(q.dtype), (q.shape[-2], len(ranks))
        ctx.scale, ctx.ranks, ctx.ws, ctx.fused = scale, ranks, ws, _fused(q)
        if ctx.fused:
            all_p, all_pos, mx, z = _triton.forward(q, k, scale, max(ranks) + 1)
            pos = _take_ranks(all_pos, ranks).contiguous()
            ctx.save_for_backward(q, k, mx, z, pos)
            return _take_ranks(all_p, ranks).view(q.shape[:-2] + (n, r))
        with torch.autocast(q.device.type, enabled=False):
            s = _scores(*_operands(q, k, scale, dtype, ws), ws)  # (G, N, N)
            mx = s.amax(-1, keepdim=True)  # (G, N, 1)
            e = s.sub_(mx).exp_()
            z = e.sum(-1, keepdim=True)
            pos = _top_positions(e, ranks, ws)  # (G, N, r)
            probs = e.gather(-1, pos).div_(z)
        ctx.save_for_backward(q, k, mx, z, pos.to(torch.int32))
        return probs.view(q.shape[:-2] + (n, r))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        q, k, mx, z, pos = ctx.saved_tensors
        dtype, (n, r) = _compute_dtype(q.dtype), (q.shape[-2], pos.shape[-1])
        grad = grad.to(dtype).reshape(-1, n, r)
        if ctx.fused:  # the forward's path, whatever the switches say now
            dq, dk = _triton.backward(q, k, ctx.scale, mx, z, pos, grad)
            return dq.view(q.shape).to(q.dtype), dk.view(k.shape).to(k.dtype), None, None, None
        pos = pos.long()
        with torch.autocast(q.device.type, enabled=False):
            qs, kc = _operands(q, k, ctx.scale, dtype, ctx.ws)
            dq, dk = _dense_backward(qs, kc, ctx.scale, mx, z, pos, ctx.ranks, grad, ctx.ws)
        return dq.view(q.shape).to(q.dtype), dk.view(k.shape).to(k.dtype), None, None, None


def ranked_softmax_probs(
    q: torch.Tensor,
    k: torch.Tensor,
    scale: float,
    ranks: Sequence[int],
    workspace: Optional[Workspace] = None,
) -> torch.Tensor:
    """Probabilities of rank ``ranks`` (0-based, descending order) in each attention row.

    Args:
        q, k: (..., N, d) queries and keys, as the attention kernel sees them.
        scale: the score scale (timm: head_dim ** -0.5).
        ranks: 0-based ranks to return, each < N (repeats allowed).
        workspace: scratch buffers to reuse across calls (CPU); a fresh one if None.

    Returns:
        (..., N, len(ranks)) float32 (float64 for float64 inputs); entry r of row i is the
        ranks[r]-th largest entry of softmax(scale * q_i k^T).
    """
    if q.shape != k.shape or q.dim() < 2:
        raise ValueError(
            f"q and k must have the same shape (..., N, d), got "
            f"{tuple(q.shape)} and {tuple(k.shape)}"
        )
    ranks = tuple(int(r) for r in ranks)
    n = k.shape[-2]
    if not ranks or min(ranks) < 0 or max(ranks) >= n:
        raise ValueError(f"ranks must be in [0, {n - 1}] for {n} keys, got {ranks}")
    return _RankedSoftmax.apply(q, k, float(scale), ranks, workspace or Workspace())
