"""The Intel AMX fault of PyTorch's CPU flash attention, emulated on any CPU.

On an AMX Xeon with ``ONEDNN_MAX_CPU_ISA`` unset and ``ATEN_CPU_CAPABILITY`` below avx512,
``F.scaled_dot_product_attention`` raises "pack_vnni2 is only supported when avx512 is
supported" wherever it picks the flash kernel for bf16 inputs (torch 2.11). With
``LIPSWEEP_TEST_AMX_FAULT=1`` the test session (conftest) and ``benchmarks/isa_matrix.py
--emulate-amx-fault`` make it raise the same way here, so the numerics tests show, on a CPU
without AMX, that every bf16 forward takes :mod:`lipsweep.vit.precision`'s route around it.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

ENV = "LIPSWEEP_TEST_AMX_FAULT"
MESSAGE = (
    "pack_vnni2 is only supported when avx512 is supported (emulated: LIPSWEEP_TEST_AMX_FAULT)"
)


def _picks_flash_in_bf16(query, key, value, *args, **kwargs) -> bool:
    """Whether PyTorch's own dispatch (``torch._fused_sdp_choice``) picks the flash kernel for
    these inputs as bf16 (the dtype they have, or get from an enclosing CPU autocast)."""
    if query.device.type != "cpu":
        return False
    bf16 = query.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    )
    if not bf16:
        return False
    q, k, v = (t.detach().to(torch.bfloat16) for t in (query, key, value))
    return torch._fused_sdp_choice(q, k, v, *args, **kwargs) == SDPBackend.FLASH_ATTENTION.value


def install() -> None:
    """Replace ``F.scaled_dot_product_attention`` with one that raises the AMX fault."""
    sdpa = F.scaled_dot_product_attention
    if getattr(sdpa, "emulates_amx_fault", False):
        return

    def faulty(query, key, value, *args, **kwargs):
        if _picks_flash_in_bf16(query, key, value, *args, **kwargs):
            raise RuntimeError(MESSAGE)
        return sdpa(query, key, value, *args, **kwargs)

    faulty.emulates_amx_fault = True  # type: ignore[attr-defined]
    F.scaled_dot_product_attention = faulty


def install_if_asked() -> bool:
    """:func:`install` where ``LIPSWEEP_TEST_AMX_FAULT=1``; whether it did."""
    if os.environ.get(ENV) == "1":
        install()
        return True
    return False
