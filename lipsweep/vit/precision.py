"""bf16 autocast for the ViT's forward pass, on every CPU kernel choice.

One PyTorch combination cannot run a bf16 ViT on the CPU: when oneDNN may use AMX (Intel Xeon
Sapphire Rapids and later, ``ONEDNN_MAX_CPU_ISA`` unset) while ATen's own kernels are held below
AVX-512 (``ATEN_CPU_CAPABILITY=avx2`` or ``default``), the CPU flash-attention kernel packs its
operands for oneDNN's AMX matmul with a routine built only into ATen's AVX-512 kernels, and
``F.scaled_dot_product_attention`` raises "pack_vnni2 is only supported when avx512 is
supported" (torch 2.11, seen on an H100 host's Xeon: docs/reliability.md). Where a one-time probe
finds that, :func:`bf16_autocast` also routes the CPU's attention to PyTorch's math kernel (the
same softmax(q k^T / sqrt(d)) v, unfused); everywhere else it is plain autocast.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from typing import Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

log = logging.getLogger(__name__)

# The CPU flash kernel packs for AMX only on long enough sequences (PyTorch's heuristic, not
# read here); the probe uses more than a ViT's 65 tokens (32 px / patch 4) and head dim 64. On
# the AMX host it failed exactly where the tests did (docs/reliability.md).
_PROBE_SHAPE = (1, 2, 128, 64)


@functools.cache
def cpu_flash_attention_runs_in_bf16() -> bool:
    """Whether PyTorch's CPU flash attention runs on bf16 inputs in this process (probed once).

    False on the kernel combination the module docstring names; the reason is logged once.
    """
    q = torch.linspace(-1.0, 1.0, steps=math.prod(_PROBE_SHAPE))
    q = q.reshape(_PROBE_SHAPE).to(torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q)
    except RuntimeError as err:
        log.warning(
            "CPU flash attention fails in bf16 with these kernels (%s; ATen capability %s): "
            "bf16 on the CPU uses PyTorch's math attention instead",
            str(err).splitlines()[0],
            torch.backends.cpu.get_cpu_capability(),
        )
        return False
    return True


def bf16_autocast(device_type: str) -> contextlib.AbstractContextManager:
    """``torch.autocast(device_type, bfloat16)``, with the CPU's attention on the math kernel
    where its flash kernel cannot run bf16 (:func:`cpu_flash_attention_runs_in_bf16`)."""
    autocast = torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    if device_type != "cpu" or cpu_flash_attention_runs_in_bf16():
        return autocast
    stack = contextlib.ExitStack()
    stack.enter_context(sdpa_kernel(SDPBackend.MATH))
    stack.enter_context(autocast)
    return stack


@contextlib.contextmanager
def tf32_matmuls(enabled: bool = True) -> Iterator[None]:
    """Allow (or forbid) TF32 in CUDA matmuls and cuDNN convolutions inside the block only."""
    prev = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
