"""The batched logit-space routes: the J J^T operator without forward-mode AD, the Ritz pair
without an eigensolver, rows leaving the batch once converged, and the TF32 route's fp32
Rayleigh quotient, each against an independent computation."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model_config
from torch import nn

from lipsweep.lipschitz import jacobian_norm_result
from lipsweep.lipschitz._krylov import (
    _top_vector_by_squaring,
    lanczos_top_eigenvalue,
    start_vector,
    top_ritz_pair,
)
from lipsweep.lipschitz.jacobian import LogitGram, measurement_mode, resolve_precision
from lipsweep.vit.attention import restore_fused_attention, set_fused_attention
from lipsweep.vit.models import create_model


def _tridiagonal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    off = torch.diag_embed(b, offset=1)
    return torch.diag_embed(a) + off + off.transpose(1, 2)


def test_squaring_finds_the_top_eigenpair_of_psd_tridiagonals():
    """Against LAPACK's eigh: random PSD tridiagonals, a near tie at the top (1e-9 apart),
    a zero matrix. theta and the residual come from the vector, so a tie stays honest."""
    g = torch.Generator().manual_seed(0)
    a = torch.rand(6, 12, generator=g, dtype=torch.float64) * 3
    b = torch.rand(6, 11, generator=g, dtype=torch.float64)
    t = _tridiagonal(a, b)
    t = t - torch.linalg.eigvalsh(t)[:, :1, None] * torch.eye(12, dtype=torch.float64)  # PSD
    tie = torch.diag(torch.tensor([1.0, 1.0 - 1e-9, 0.5, 0.1], dtype=torch.float64))
    for mats in (t, tie[None], torch.zeros(1, 5, 5, dtype=torch.float64)):
        s = _top_vector_by_squaring(mats)
        theta = torch.einsum("mi,mij,mj->m", s, mats, s)
        top = torch.linalg.eigvalsh(mats)[:, -1]
        torch.testing.assert_close(theta, top, rtol=1e-12, atol=1e-300)
        torch.testing.assert_close(s.norm(dim=1), torch.ones(len(s), dtype=torch.float64))
        resid = (torch.einsum("mij,mj->mi", mats, s) - theta[:, None] * s).norm(dim=1)
        assert (resid <= 1e-9 * top.clamp_min(1e-300) + 1e-300).all()


def test_top_ritz_pair_residual_is_beta_times_last_component():
    """For an exact eigenvector of T_j the residual estimate reduces to beta_j |s_j|."""
    g = torch.Generator().manual_seed(1)
    a = torch.rand(3, 7, generator=g, dtype=torch.float64) + 2
    b = torch.rand(3, 7, generator=g, dtype=torch.float64) * 0.3
    theta, resid, s = top_ritz_pair(a, b)
    evals, evecs = torch.linalg.eigh(_tridiagonal(a, b[:, :-1]))
    torch.testing.assert_close(theta, evals[:, -1])
    torch.testing.assert_close(resid, b[:, -1] * evecs[:, -1, -1].abs())


class _Diagonal:
    """Rows of diagonal PSD operators that count the rows each application touches."""

    def __init__(self, diag: torch.Tensor, log: list[int]) -> None:
        self.diag, self.log = diag, log

    def __call__(self, u: torch.Tensor) -> torch.Tensor:
        self.log.append(len(u))
        return self.diag * u

    def restrict(self, keep: torch.Tensor) -> "_Diagonal":
        return _Diagonal(self.diag.index_select(0, keep), self.log)


def test_converged_rows_leave_the_batch_without_changing_any_result():
    """Rows with a wide gap converge in a few steps, rows with a narrow one take many: with
    shrink the late steps run on the slow rows alone, and every value, iteration count, flag
    and Ritz vector is the one of the unshrunk run."""
    g = torch.Generator().manual_seed(0)
    n = 40
    diag = torch.rand(8, n, generator=g, dtype=torch.float64) * 0.5
    diag[:, 0] = 1.0
    diag[4:, 1] = 0.999  # narrow gaps: slow rows
    v0 = start_vector(8, n, torch.float64, torch.device("cpu"))
    plain_log: list[int] = []
    shrunk_log: list[int] = []
    plain = lanczos_top_eigenvalue(_Diagonal(diag, plain_log), v0, 40, 1e-10, keep_vectors=True)
    shrunk = lanczos_top_eigenvalue(
        _Diagonal(diag, shrunk_log), v0, 40, 1e-10, keep_vectors=True, shrink=0.5
    )
    torch.testing.assert_close(shrunk.value, plain.value, rtol=1e-13, atol=0)
    assert torch.equal(shrunk.iterations, plain.iterations)
    assert torch.equal(shrunk.converged, plain.converged)
    assert plain.vector is not None and shrunk.vector is not None
    torch.testing.assert_close(shrunk.vector, plain.vector, rtol=0, atol=1e-12)
    assert min(shrunk_log) == 4 and sum(shrunk_log) < sum(plain_log)
    torch.testing.assert_close(plain.value, diag.amax(1), rtol=1e-9, atol=0)
    rayleigh = (plain.vector * diag * plain.vector).sum(1)  # the Ritz vector's own quotient
    torch.testing.assert_close(rayleigh, plain.value, rtol=1e-9, atol=0)


@pytest.fixture(scope="module")
def vit64() -> nn.Module:
    torch.manual_seed(0)
    cfg = tiny_model_config(img_size=16, patch_size=4, depth=2, embed_dim=64, num_classes=100)
    return create_model(cfg).double().eval()


def test_logit_gram_equals_a_forward_mode_jvp_after_a_vjp(vit64):
    """J (J^T u) by two reverse passes (LogitGram) against torch.func.jvp of J^T u."""
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    u = torch.randn(3, 100, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with measurement_mode(vit64, fused=False):
        got = LogitGram(vit64, x, tf32=False)(u)
        xg = x.clone().requires_grad_(True)
        with torch.enable_grad():
            (vt,) = torch.autograd.grad(vit64(xg), xg, u)
        flags = set_fused_attention(vit64, False)
        try:
            _, want = torch.func.jvp(vit64, (x,), (vt,))
        finally:
            restore_fused_attention(vit64, flags)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def _reference_norms(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Per-image autograd Jacobian (C x n) and its largest singular value."""
    out = []
    for xi in x:
        jac = torch.autograd.functional.jacobian(lambda z: model(z.unsqueeze(0))[0], xi)
        out.append(torch.linalg.matrix_norm(jac.reshape(jac.shape[0], -1), 2))
    return torch.stack(out)


def _with_head_spectrum(model: nn.Module, peaked: bool, classes: int) -> nn.Module:
    """The head's weight set to U diag(s) V^T: s = 8, 1, 1, ... (peaked) or 1, .99, .98, ...
    (flat), so J's top singular value is well separated or nearly tied."""
    g = torch.Generator().manual_seed(4)
    head = model.net.head
    d = head.weight.shape[1]
    k = min(classes, d)
    u = torch.linalg.qr(torch.randn(classes, k, generator=g, dtype=torch.float64)).Q
    v = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64)).Q
    s = torch.ones(k, dtype=torch.float64)
    if peaked:
        s[0] = 8.0
    else:
        s = 1 - 0.01 * torch.arange(k, dtype=torch.float64)
    with torch.no_grad():
        head.weight.copy_((u * s) @ v.T)
    return model


@pytest.mark.parametrize("classes", [10, 100])
@pytest.mark.parametrize("peaked", [True, False], ids=["peaked", "flat"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_lanczos_within_its_tolerance_of_the_svd(classes, peaked, precision):
    """Every converged value within tol of sigma_1^2 from the exact SVD, never above it (a
    Rayleigh quotient), at C = 10 and 100, on peaked and flat spectra. 'tf32' takes the
    refinement path (on a CPU its products are fp32: the path, not TF32's rounding, is
    tested here; benchmarks/gpu_suite.py measures TF32 against fp32 on the GPU)."""
    torch.manual_seed(0)
    cfg = tiny_model_config(img_size=16, patch_size=4, depth=2, embed_dim=64, num_classes=classes)
    model = _with_head_spectrum(create_model(cfg).double().eval(), peaked, classes)
    x = torch.rand(5, 3, 16, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ref = _reference_norms(model, x) ** 2
    tol = 1e-3
    res = jacobian_norm_result(model, x, 100, route="lanczos", tol=tol, precision=precision)
    got = res.values.double() ** 2
    assert res.converged.all()
    assert (got <= ref * (1 + 1e-10)).all()
    assert ((ref - got) <= tol * ref).all(), (got, ref)
    exact = jacobian_norm_result(model, x, 100, route="exact", precision=precision)
    torch.testing.assert_close(exact.values.double() ** 2, ref, rtol=1e-9, atol=0)


def test_precision_auto_is_tf32_for_the_exact_route_on_cuda_only():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_precision("auto", cuda, "exact") == "tf32"
    assert resolve_precision("auto", cuda, "lanczos") == "fp32"
    assert resolve_precision("auto", cuda, "power") == "fp32"
    assert resolve_precision("auto", cpu, "exact") == "fp32"
    assert resolve_precision("fp32", cuda, "exact") == "fp32"
    assert resolve_precision("tf32", cuda, "lanczos") == "tf32"
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("bf16", torch.device("cpu"))
