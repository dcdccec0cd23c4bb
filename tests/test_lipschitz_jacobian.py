"""||J_f(x)||_2 per sample against the exact SVD of the full Jacobian (docs/science.md §1.5)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model_config
from torch import nn

from lipsweep.lipschitz import (
    EXACT_MAX_CLASSES,
    jacobian_norm_result,
    jacobian_spectral_norm,
    resolve_route,
)
from lipsweep.lipschitz._krylov import lanczos_top_eigenvalue, power_top_eigenvalue
from lipsweep.vit.attention import set_fused_attention
from lipsweep.vit.models import attention_modules, create_model

ITERATIVE_RTOL = 1e-2  # the brief: iterative routes within 1% at their default tolerance


def _full_jacobian_norms(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Reference: per-sample autograd Jacobian (C x n) and its largest singular value."""
    out = []
    for xi in x:
        jac = torch.autograd.functional.jacobian(lambda z: model(z.unsqueeze(0))[0], xi)
        out.append(torch.linalg.matrix_norm(jac.reshape(jac.shape[0], -1), 2))
    return torch.stack(out)


@pytest.fixture(scope="module")
def small_vit() -> nn.Module:
    torch.manual_seed(0)
    return (
        create_model(tiny_model_config(img_size=16, patch_size=4, depth=2, embed_dim=64))
        .double()
        .eval()
    )


@pytest.fixture(scope="module")
def small_batch() -> torch.Tensor:
    return torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


@pytest.fixture(scope="module")
def reference(small_vit, small_batch) -> torch.Tensor:
    return _full_jacobian_norms(small_vit, small_batch)


def test_exact_route_matches_svd_of_full_jacobian(small_vit, small_batch, reference):
    res = jacobian_norm_result(small_vit, small_batch, iters=10, route="exact")
    assert res.route == "exact" and res.values.shape == (4,)
    torch.testing.assert_close(res.values, reference, rtol=1e-5, atol=0)
    assert res.converged.all() and (res.iterations == 10).all()


@pytest.mark.parametrize("route", ["lanczos", "power"])
def test_iterative_routes_match_svd_at_default_tolerance(small_vit, small_batch, reference, route):
    res = jacobian_norm_result(small_vit, small_batch, iters=100, route=route)
    assert res.route == route and res.converged.all()
    rel = (res.values - reference).abs() / reference
    assert rel.max() < ITERATIVE_RTOL, rel
    # Ritz values / Rayleigh quotients never exceed the top eigenvalue.
    assert (res.values <= reference * (1 + 1e-9)).all()


def test_float32_tiny_vit_exact_and_lanczos_agree():
    torch.manual_seed(3)
    model = create_model(tiny_model_config(depth=2)).eval()
    x = torch.rand(3, 3, 32, 32)
    exact = jacobian_spectral_norm(model, x, 100, route="exact")
    lanczos = jacobian_spectral_norm(model, x, 100, route="lanczos")
    assert exact.dtype == torch.float32 and exact.shape == (3,)
    torch.testing.assert_close(lanczos, exact, rtol=ITERATIVE_RTOL, atol=0)


class _Linear(nn.Module):
    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.lin = nn.Linear(w.shape[1], w.shape[0], bias=True, dtype=w.dtype)
        with torch.no_grad():
            self.lin.weight.copy_(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.flatten(1))


@pytest.mark.parametrize("classes", [7, 100])
@pytest.mark.parametrize("route", ["auto", "exact", "lanczos", "power"])
def test_linear_model_gives_weight_spectral_norm(route, classes):
    g = torch.Generator().manual_seed(classes)
    w = torch.randn(classes, 3 * 4 * 4, generator=g, dtype=torch.float64)
    w[0] *= 3  # a clear top singular value
    model = _Linear(w)
    x = torch.rand(5, 3, 4, 4, generator=g, dtype=torch.float64)
    res = jacobian_norm_result(model, x, iters=200, route=route)
    want = torch.linalg.matrix_norm(w, 2).expand(5)
    rtol = 1e-10 if res.route == "exact" else ITERATIVE_RTOL
    torch.testing.assert_close(res.values, want, rtol=rtol, atol=0)
    assert res.route == (resolve_route("auto", classes) if route == "auto" else route)


def test_auto_route_threshold():
    assert resolve_route("auto", EXACT_MAX_CLASSES) == "exact"
    assert resolve_route("auto", EXACT_MAX_CLASSES + 1) == "lanczos"
    assert resolve_route("power", 10) == "power"
    with pytest.raises(ValueError, match="route"):
        resolve_route("svd", 10)


@pytest.mark.parametrize("route", ["exact", "lanczos"])
def test_plain_timm_vit_fused_flag_and_modes_restored(route):
    """As a user builds it: fused attention on, train mode; both come back unchanged."""
    torch.manual_seed(0)
    model = create_model(tiny_model_config(img_size=16, depth=2))
    blocks = list(attention_modules(model))
    assert all(a.fused_attn for a in blocks), "timm default should be the fused path"
    model.train()
    model.net.blocks[0].eval()  # a mixed state must survive too
    seen = []
    hook = blocks[0].register_forward_pre_hook(lambda m, a: seen.append((m.training, m.fused_attn)))
    vals = jacobian_spectral_norm(model, torch.rand(3, 3, 16, 16), 50, route=route)
    hook.remove()
    assert torch.isfinite(vals).all() and (vals > 0).all()
    assert all(not training for training, _ in seen)  # measured in eval mode
    if route == "lanczos":
        assert any(not fused for _, fused in seen)  # JVPs ran with the fused path off
    assert model.training and not model.net.blocks[0].training
    assert model.net.blocks[1].training
    assert all(a.fused_attn for a in blocks)


def test_flags_restored_after_an_error():
    torch.manual_seed(0)
    model = create_model(tiny_model_config(img_size=16, depth=1)).train()
    set_fused_attention(model, True)

    def boom(*_):
        raise RuntimeError("boom")

    h = model.net.head.register_forward_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        jacobian_spectral_norm(model, torch.rand(2, 3, 16, 16), 10, route="lanczos")
    h.remove()
    assert model.training and all(a.fused_attn for a in attention_modules(model))


def _saved_activation_bytes(model: nn.Module, fn) -> int:
    """Bytes of the non-parameter tensors autograd saves for backward while ``fn`` runs."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        try:
            ptr, size = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
        except RuntimeError:  # a torch.func wrapper: saved during a JVP's forward
            ptr, size = None, t.numel() * t.element_size()
        if ptr not in params:
            total += size
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


@pytest.mark.parametrize("route", ["exact", "lanczos"])
def test_measurement_records_no_graph_towards_the_weights(route):
    """Input gradients only: the measurement saves exactly what it saves for a model whose
    weights were frozen beforehand (no activations for weight gradients), the exact route
    exactly what one forward with frozen weights saves, and it leaves no .grad and gives each
    parameter its requires_grad back. (Lanczos saves more than a forward by design: the
    graph of J^T u that its J products run backwards through, see LogitGram.)"""
    torch.manual_seed(0)
    model = create_model(tiny_model_config(img_size=16, depth=2)).eval()
    model.net.head.bias.requires_grad_(False)  # a mixed state must come back as it was
    want = [p.requires_grad for p in model.parameters()]
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))

    def frozen(fn):
        def run() -> None:
            for p in model.parameters():
                p.requires_grad_(False)
            fn()
            for p, req in zip(model.parameters(), want):
                p.requires_grad_(req)

        return run

    def measure() -> None:
        jacobian_norm_result(model, x, 20, route=route)

    got = _saved_activation_bytes(model, measure)
    assert got == _saved_activation_bytes(model, frozen(measure))
    if route == "exact":
        assert got == _saved_activation_bytes(
            model, frozen(lambda: model(x.clone().requires_grad_()))
        )
    assert [p.requires_grad for p in model.parameters()] == want
    assert all(p.grad is None for p in model.parameters())


def test_batch_size_chunks_do_not_change_results(small_vit, small_batch):
    whole = jacobian_spectral_norm(small_vit, small_batch, 10, route="exact")
    chunked = jacobian_spectral_norm(small_vit, small_batch, 10, route="exact", batch_size=3)
    torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(iters=0), "iters"),
        (dict(iters=2.5), "iters"),
        (dict(route="svd"), "route"),
        (dict(tol=0.0), "tol"),
        (dict(batch_size=0), "batch_size"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    model = _Linear(torch.randn(3, 12, dtype=torch.float64))
    args = dict(iters=10) | kwargs
    with pytest.raises(ValueError, match=match):
        jacobian_spectral_norm(model, torch.rand(2, 3, 2, 2, dtype=torch.float64), **args)


def test_bad_inputs_are_rejected():
    model = _Linear(torch.randn(3, 12, dtype=torch.float64))
    with pytest.raises(ValueError, match="floating"):
        jacobian_spectral_norm(model, torch.ones(2, 3, 2, 2, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="logits"):
        jacobian_spectral_norm(nn.Flatten(0), torch.rand(2, 3, 2, 2), 10)


def test_power_route_flags_converged_only_within_tolerance_of_svdvals():
    """A linear 10-logit model with singular values 1, .99, .98, .97, .96 and five of
    0.5. Stopping once the Rayleigh quotient changes < tol would return sigma_1^2 = 0.9899
    (2% low, 20 x tol) flagged converged after 26 steps. Every value flagged converged must be
    within tol of sigma_1^2 (svdvals), whatever the iteration cap; unflagged ones are lower
    bounds."""
    g = torch.Generator().manual_seed(0)
    n_in = 3 * 4 * 4
    u = torch.linalg.qr(torch.randn(10, 10, generator=g, dtype=torch.float64)).Q
    v = torch.linalg.qr(torch.randn(n_in, 10, generator=g, dtype=torch.float64)).Q
    sv = torch.tensor([1, 0.99, 0.98, 0.97, 0.96] + [0.5] * 5, dtype=torch.float64)
    w = u @ torch.diag(sv) @ v.T
    sigma1_sq = float(torch.linalg.svdvals(w)[0]) ** 2
    x = torch.rand(2, 3, 4, 4, generator=g, dtype=torch.float64)
    tol = 1e-3
    for iters in (26, 100, 2000):
        res = jacobian_norm_result(_Linear(w), x, iters=iters, route="power", tol=tol)
        vals = res.values.double() ** 2
        assert (vals <= sigma1_sq * (1 + 1e-12)).all()  # a Rayleigh quotient: a lower bound
        ok = res.converged
        assert ((sigma1_sq - vals[ok]) <= tol * sigma1_sq).all(), (iters, vals, ok)
    assert res.converged.all()  # 2000 steps are enough for this spectrum


def test_head_exact_norm_is_nan_where_lanczos_did_not_converge():
    """Head_exact_norm dropped the Lanczos converged flag, so a too-low cap silently
    understated the "exact" value. Capped at 2 steps it is NaN; uncapped it matches 'full'."""
    from lipsweep.lipschitz import head_exact_norm, head_weights
    from lipsweep.lipschitz.head_bounds import AttentionInputs

    torch.manual_seed(0)
    cfg = tiny_model_config(img_size=16, patch_size=4, depth=1, embed_dim=32, num_heads=2)
    model = create_model(cfg).double().eval()
    with torch.no_grad(), AttentionInputs(model) as rec:
        model(torch.rand(2, 3, 16, 16, dtype=torch.float64))
    x, w = rec.inputs[0], head_weights(rec.blocks[0])
    capped = head_exact_norm(x, w, "lanczos", iters=2, tol=1e-10)
    assert capped.shape == (2, 2) and bool(capped.isnan().all())
    full = head_exact_norm(x, w, "full")
    torch.testing.assert_close(head_exact_norm(x, w, "lanczos", iters=400, tol=1e-10), full)


@pytest.mark.parametrize("solver", [lanczos_top_eigenvalue, power_top_eigenvalue])
def test_krylov_solvers_on_known_spectra(solver):
    """Rows are independent diagonal PSD operators with known top eigenvalues."""
    g = torch.Generator().manual_seed(0)
    diag = torch.rand(5, 30, generator=g, dtype=torch.float64)
    diag[:, 0] = torch.tensor([2.0, 3.0, 5.0, 1.5, 1.2], dtype=torch.float64)
    v0 = torch.ones(5, 30, dtype=torch.float64)
    res = solver(lambda v: diag * v, v0, 500, 1e-10)
    assert res.converged.all()
    torch.testing.assert_close(res.value, diag.amax(1), rtol=1e-6, atol=0)


def _reference_tokens(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """T written out with timm's stages: patch embedding, CLS + position embedding, norm_pre."""
    return net.norm_pre(net.patch_drop(net._pos_embed(net.patch_embed(x))))


def test_token_jacobian_matches_autograd_jacobian_of_the_blocks_and_head(small_vit, small_batch):
    """||d f / d T||_2 (paper Fig. 4) against torch.autograd.functional.jacobian of
    T -> head(norm(blocks(T))), T the 17 tokens (CLS included) after the position embedding."""
    from lipsweep.lipschitz import token_jacobian_norm_result
    from lipsweep.lipschitz.token_jacobian import token_embeddings

    net = small_vit.net
    x_norm = (small_batch - small_vit.mean) / small_vit.std
    with torch.no_grad():
        tokens = _reference_tokens(net, x_norm)  # (B, 17, 64)
    assert tokens.shape == (4, 17, 64)
    torch.testing.assert_close(token_embeddings(small_vit, small_batch), tokens)

    def rest(t: torch.Tensor) -> torch.Tensor:  # (17, 64) -> (C,)
        return net.forward_head(net.norm(net.blocks(t.unsqueeze(0))))[0]

    ref = []
    for t in tokens:
        jac = torch.autograd.functional.jacobian(rest, t)  # (C, 17, 64)
        ref.append(torch.linalg.matrix_norm(jac.reshape(jac.shape[0], -1), 2))
    ref = torch.stack(ref)
    exact = token_jacobian_norm_result(small_vit, small_batch, 10, route="exact")
    torch.testing.assert_close(exact.values, ref, rtol=1e-6, atol=0)
    lanczos = token_jacobian_norm_result(small_vit, small_batch, 100, route="lanczos")
    assert ((lanczos.values - ref).abs() / ref).max() < ITERATIVE_RTOL
    # not the pixel Jacobian: the patch embedding and normalisation are left out
    pixel = jacobian_spectral_norm(small_vit, small_batch, 10, route="exact")
    assert ((pixel - ref).abs() / ref).min() > 1e-3


def test_summary_reports_token_jacobian_metrics_beside_the_pixel_ones(
    small_vit, small_batch, tmp_path
):
    from lipsweep.lipschitz import LipschitzConfig, lipschitz_summary

    cfg = LipschitzConfig(lip_softmax=False, lip_head_bounds=False, lip_route="exact")
    metrics = lipschitz_summary(small_vit, small_batch, cfg, out_dir=tmp_path)
    for stat in ("mean", "median", "p90", "p99", "max"):
        assert f"lip_jacobian_{stat}" in metrics and f"lip_jacobian_tokens_{stat}" in metrics
    assert metrics["lip_jacobian_tokens_converged_frac"] == 1.0
    assert (tmp_path / "lipschitz_jacobian_tokens_hist.png").is_file()
    off = lipschitz_summary(
        small_vit,
        small_batch,
        LipschitzConfig(
            lip_softmax=False, lip_head_bounds=False, lip_tokens=False, lip_figures=False
        ),
    )
    assert not any(k.startswith("lip_jacobian_tokens") for k in off)
