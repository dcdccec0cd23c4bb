"""The fused Triton path of JaSMin's ranked softmax against exact references.

On a machine with CUDA the kernels run compiled; elsewhere the same checks run in a
subprocess under ``TRITON_INTERPRET=1`` (Triton's CPU interpreter, read when the kernels are
defined, so it must be set before they are imported). The reference is float64 autograd
through ``softmax`` and ``gather`` at the positions the kernel chose (a sort of the float64
row gives the same positions except on ties, which the tie test covers separately).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

# (B, H, N, d): N and d off the powers of two (padding), N over one row block of the forward
# (32 rows) and the backward (16 rows).
SHAPE = (1, 2, 40, 24)


def check(device: str) -> dict:
    """Fused vs float64 on float32 and bfloat16 inputs with peaked and flat heads, for the
    ranks of k = 0, 2 (a repeated rank) and 10. Returns the worst relative errors."""
    from lipsweep.regularizers import _ranked_softmax as rs
    from lipsweep.regularizers import _ranked_softmax_triton as tri
    from lipsweep.regularizers.jasmin import jasmin_ranks

    b, h, n, d = SHAPE
    g = torch.Generator().manual_seed(0)
    worst = {"p": 0.0, "dq": 0.0, "dk": 0.0}
    for dtype in (torch.float32, torch.bfloat16):
        qkv = torch.randn(b, n, 3, h, d, generator=g)
        qkv[:, :, 0, 0] *= 12.0  # head 0: peaked rows (top probability ~1)
        qkv = qkv.to(dtype=dtype, device=device).permute(2, 0, 3, 1, 4)  # strided, as timm's
        q0, k0 = qkv[0], qkv[1]
        assert tri.applies(q0), "the fused path must serve this shape"
        for k_reg in (0, 2, 10):
            ranks = jasmin_ranks(k_reg)
            q = q0.detach().clone().requires_grad_()
            k = k0.detach().clone().requires_grad_()
            p = rs.ranked_softmax_probs(q, k, d**-0.5, ranks)
            w = torch.randn(p.shape, generator=g).to(device)
            (p * w).sum().backward()
            # float64 reference at the kernel's positions
            qd = q0.detach().double().requires_grad_()
            kd = k0.detach().double().requires_grad_()
            full = ((qd * d**-0.5) @ kd.transpose(-2, -1)).softmax(-1)
            pos = full.detach().argsort(-1, descending=True)[..., list(ranks)]
            ref = full.gather(-1, pos)
            (ref * w.double()).sum().backward()
            tol_p = 1e-5 if dtype == torch.float32 else 1e-5  # S is exact from bf16 inputs
            err_p = float((p.detach().double() - ref).norm() / ref.norm())
            err_q = float((q.grad.double() - qd.grad).norm() / qd.grad.norm())
            err_k = float((k.grad.double() - kd.grad).norm() / kd.grad.norm())
            # gradients come back in the input dtype: bf16 rounding is 2^-9 relative
            tol_g = 1e-4 if dtype == torch.float32 else 8e-3
            assert err_p < tol_p, (dtype, k_reg, "p", err_p)
            assert err_q < tol_g, (dtype, k_reg, "dq", err_q)
            assert err_k < tol_g, (dtype, k_reg, "dk", err_k)
            for key, v in (("p", err_p), ("dq", err_q), ("dk", err_k)):
                worst[key] = max(worst[key], v)
    # exact ties (all scores equal): distinct positions, each probability 1/N
    z = torch.zeros(1, 1, n, d, device=device)
    p = rs.ranked_softmax_probs(z, z, 1.0, (0, 1, 2, 3))
    assert torch.allclose(p.cpu(), torch.full((1, 1, n, 4), 1.0 / n))
    return worst


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled kernels need CUDA")
def test_fused_kernels_on_cuda():
    check("cuda")


def test_fused_kernels_in_the_triton_interpreter():
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("compiled on this machine: test_fused_kernels_on_cuda checks them")
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from tests.test_ranked_softmax_triton import check
        print(check("cpu"))
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_unfused_path_serves_cpu_without_the_interpreter():
    """Without CUDA (and without TRITON_INTERPRET) the kernels are never imported."""
    from lipsweep.regularizers import _ranked_softmax_triton as tri

    if os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available():
        pytest.skip("this checks the plain CPU machine")
    assert not tri.applies(torch.zeros(1, 1, 4, 4))
