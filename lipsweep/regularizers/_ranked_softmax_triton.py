"""Fused CUDA kernels (Triton) for :mod:`._ranked_softmax`: the same ranked probabilities and
gradients, one program per (sample, head), with S kept in registers.

Why: on an H100 the unfused path cost 4.9 ms per ViT-B layer at batch 512 (forward plus
backward; torch.topk alone 1.9 ms), so a JaSMin step ran at 1.95x the baseline step
(docs/benchmarks.md, "JaSMin on the GPU"). Each pass over the (B, H, N, N) scores there
reads and writes 104 MB; here q and k are read once per pass and S never leaves the chip.

Forward (per row block of one (b, h)): S = scale q k^T (fp32 accumulation; ``ieee`` for
float32 inputs), m = max_j s_j, e = exp(s - m), z = sum_j e_j, then M rounds of "take the
row's largest remaining e, lowest column on ties, knock it out", which gives the positions
and probabilities e / z of ranks 0..M-1. Backward: the same S and e, then exactly the dense
formula of :func:`._ranked_softmax._dense_backward` (selected entries as own (1 - y) - y *
others; every other entry -p sum_r c_r), and dq = scale dS k, dk = scale dS^T q, with dk
summed over the row blocks inside the program (no atomics).

Used by :class:`._ranked_softmax._RankedSoftmax` for CUDA tensors of float32, bfloat16 or
float16 with N <= 128 and head dim <= 64 when Triton imports (torch's CUDA wheels bring it);
else the unfused path. The kernels are defined on first use, so importing this module needs
no Triton. ``TRITON_INTERPRET=1`` runs them on CPU tensors (tests/test_ranked_softmax_triton.py).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

MAX_TOKENS = 128
"""Largest N served (one tile of 128 key columns): the shapes measured on the H100 (N = 65,
d = 64). Longer sequences (224 px / patch 16: N = 197) keep the unfused path until a GPU
session measures the kernels' register use there."""
MAX_HEAD_DIM = 64
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

FWD_CONFIG = {"BLOCK_M": 16, "num_warps": 2}
"""Rows per block and warps of the forward kernel (benchmarks/bench_jasmin_cuda.py ``tune``)."""
BWD_CONFIG = {"BLOCK_M": 16, "num_warps": 4}
"""Rows per block and warps of the backward kernel."""


def _pow2(n: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Triton imports (and, outside the interpreter, CUDA is there)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()


def applies(q: torch.Tensor) -> bool:
    """Whether the fused kernels serve ``q`` (B, H, N, d) and its k."""
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    return (
        (q.is_cuda or interp)
        and q.dim() == 4
        and q.dtype in _DTYPES
        and q.shape[-2] <= MAX_TOKENS
        and q.shape[-1] <= MAX_HEAD_DIM
        and available()
    )


def _kernels() -> Any:
    from lipsweep.regularizers import _ranked_softmax_kernels as kern

    return kern.fwd, kern.bwd


def _launch_args(q: torch.Tensor, k: torch.Tensor) -> tuple:
    b, h, n, d = q.shape
    return (*q.stride(), *k.stride(), h, n, d)


def forward(
    q: torch.Tensor, k: torch.Tensor, scale: float, m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k) (B, H, N, d) -> probabilities and int32 positions of ranks 0..m-1, (G, N, m),
    and the row max and sum (G, N, 1) float32, G = B H."""
    fwd, _ = _kernels()
    b, h, n, d = q.shape
    g = b * h
    dev = q.device
    mx = torch.empty(g, n, 1, device=dev, dtype=torch.float32)
    z = torch.empty_like(mx)
    pos = torch.empty(g, n, m, device=dev, dtype=torch.int32)
    probs = torch.empty(g, n, m, device=dev, dtype=torch.float32)
    fwd[(g,)](
        q, k, mx, z, pos, probs, *_launch_args(q, k), float(scale),
        M=m, BLOCK_N=_pow2(n), BLOCK_D=_pow2(d), IEEE=q.dtype == torch.float32,
        **FWD_CONFIG,
    )  # fmt: skip
    return probs, pos, mx, z


def backward(
    q: torch.Tensor,
    k: torch.Tensor,
    scale: float,
    mx: torch.Tensor,
    z: torch.Tensor,
    pos: torch.Tensor,
    grad: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dL/dq, dL/dk (G, N, d) float32 from the forward's mx, z, the positions of the returned
    ranks ``pos`` (G, N, r) int32 and their upstream gradient ``grad`` (G, N, r)."""
    _, bwd = _kernels()
    b, h, n, d = q.shape
    g, r = b * h, pos.shape[-1]
    dq = torch.empty(g, n, d, device=q.device, dtype=torch.float32)
    dk = torch.empty_like(dq)
    bwd[(g,)](
        q, k, mx, z, pos.contiguous(), grad.contiguous(), dq, dk, *_launch_args(q, k),
        float(scale), R=r, BLOCK_N=_pow2(n), BLOCK_D=_pow2(d),
        IEEE=q.dtype == torch.float32, **BWD_CONFIG,
    )  # fmt: skip
    return dq, dk
