"""bf16 autocast on every CPU kernel choice (lipsweep/vit/precision.py).

The kernel combination that breaks PyTorch's CPU flash attention in bf16 (oneDNN with AMX,
ATen held below AVX-512) needs an AMX CPU; ``benchmarks/isa_matrix.py`` runs the numerics tests
there. These tests pin the two halves that hold on any CPU: the probe turns the kernel's error
into False, and False routes the CPU's attention to the math kernel.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.nn.functional as F
from _amx_fault import ENV as AMX_FAULT_ENV
from torch.profiler import profile

from lipsweep.vit import precision

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"
MATH = "aten::_scaled_dot_product_attention_math"


def attention_ops() -> set[str]:
    q = torch.randn(1, 2, 128, 64)
    with profile() as prof, precision.bf16_autocast("cpu"):
        out = F.scaled_dot_product_attention(q, q, q)
    assert out.dtype == torch.bfloat16
    return {e.key for e in prof.key_averages()} & {FLASH, MATH}


@pytest.mark.parametrize("flash_runs", [True, False])
def test_bf16_autocast_runs_cpu_attention_on_math_only_where_flash_fails(monkeypatch, flash_runs):
    if flash_runs and not precision.cpu_flash_attention_runs_in_bf16():
        pytest.skip("these kernels cannot run CPU flash attention in bf16 (the AMX case)")
    monkeypatch.setattr(precision, "cpu_flash_attention_runs_in_bf16", lambda: flash_runs)
    assert attention_ops() == ({FLASH} if flash_runs else {MATH})


def test_the_probe_reads_the_kernel_error_as_flash_unusable(monkeypatch, caplog):
    def pack_error(*args, **kwargs):
        raise RuntimeError("pack_vnni2 is only supported when avx512 is supported")

    precision.cpu_flash_attention_runs_in_bf16.cache_clear()
    monkeypatch.setattr(precision.F, "scaled_dot_product_attention", pack_error)
    try:
        with caplog.at_level(logging.WARNING, logger=precision.__name__):
            assert precision.cpu_flash_attention_runs_in_bf16() is False
        assert "pack_vnni2" in caplog.text and "math attention" in caplog.text
    finally:
        precision.cpu_flash_attention_runs_in_bf16.cache_clear()
    monkeypatch.undo()
    if "ATEN_CPU_CAPABILITY" not in os.environ and os.environ.get(AMX_FAULT_ENV) != "1":
        # unrestricted kernels run it on any CPU, unless the AMX fault is emulated
        assert precision.cpu_flash_attention_runs_in_bf16() is True
