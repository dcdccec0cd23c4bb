"""The per-step logit Lanczos that the batched route is measured against, kept verbatim as a
baseline: each step one VJP on the forward's graph and one forward-mode JVP
(``torch.func.jvp``, unfused attention), the Ritz eigh of T_j on the host for CUDA inputs
(a round trip per check), and every image of the batch iterated until the slowest converges.

benchmarks/bench_lipschitz.py (CPU) and benchmarks/gpu_suite.py (GPU) time it beside
``lipsweep.lipschitz.jacobian_norm_result`` in the same run; the values agree within the
routes' tolerance (both are lower bounds on sigma_1).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from lipsweep.lipschitz._krylov import start_vector
from lipsweep.lipschitz.jacobian import measurement_mode
from lipsweep.vit.attention import restore_fused_attention, set_fused_attention

_BREAKDOWN = 1e-12


def _check_due(j: int) -> bool:
    return j < 16 or j % 4 == 3


def _top_ritz(
    alphas: list[torch.Tensor], betas: list[torch.Tensor], eigh_device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    home = alphas[0].device
    a = torch.stack(alphas, 1).to(eigh_device)
    b = torch.stack(betas, 1).to(eigh_device)
    t = torch.diag_embed(a)
    if a.shape[1] > 1:
        off = torch.diag_embed(b[:, :-1], offset=1)
        t = t + off + off.transpose(1, 2)
    evals, evecs = torch.linalg.eigh(t)
    return evals[:, -1].to(home), (b[:, -1] * evecs[:, -1, -1].abs()).to(home)


def _lanczos(
    op: Callable[[torch.Tensor], torch.Tensor],
    v0: torch.Tensor,
    iters: int,
    tol: float,
    eigh_device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = v0.shape
    steps = min(iters, n)
    q = v0 / v0.norm(dim=1, keepdim=True)
    q_prev = torch.zeros_like(q)
    beta_prev = torch.zeros(m, dtype=v0.dtype, device=v0.device)
    alphas: list[torch.Tensor] = []
    betas: list[torch.Tensor] = []
    value = torch.zeros(m, dtype=torch.float64, device=v0.device)
    used = torch.full((m,), steps, dtype=torch.int64, device=v0.device)
    done = torch.zeros(m, dtype=torch.bool, device=v0.device)
    for j in range(steps):
        w = op(q)
        alpha = (w * q).sum(1)
        w = w - alpha[:, None] * q - beta_prev[:, None] * q_prev
        w = w - (w * q).sum(1, keepdim=True) * q
        beta = w.norm(dim=1)
        alphas.append(alpha.double())
        betas.append(beta.double())
        last = j == steps - 1
        if _check_due(j) or last:
            theta, resid = _top_ritz(alphas, betas, eigh_device)
            ok = (resid <= tol * theta) | (beta.double() <= _BREAKDOWN * theta.clamp_min(1e-300))
            new = ~done & (ok | last)
            value = torch.where(new, theta, value)
            used = torch.where(new & ok, torch.full_like(used, j + 1), used)
            done = done | ok
            if last or bool(done.all()):
                break
        q_prev, beta_prev = q, beta
        q = w / beta.clamp_min(torch.finfo(w.dtype).tiny)[:, None]
    return value, used, done


def reference_lanczos_norms(
    model: nn.Module, x: torch.Tensor, iters: int = 100, tol: float = 1e-3
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigma_1 per image, iterations per image) by the per-step route, strict fp32."""
    eigh_device = torch.device("cpu") if x.device.type == "cuda" else x.device
    with measurement_mode(model):
        xg = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            out = model(xg)
        xd = xg.detach()

        def op(u: torch.Tensor) -> torch.Tensor:
            (vt,) = torch.autograd.grad(out, xg, u.to(out.dtype), retain_graph=True)
            flags = set_fused_attention(model, False)
            try:
                _, ju = torch.func.jvp(model, (xd,), (vt,))
            finally:
                restore_fused_attention(model, flags)
            return ju.detach()

        u0 = start_vector(out.shape[0], out.shape[1], out.dtype, out.device)
        value, used, _ = _lanczos(op, u0, iters, tol, eigh_device)
    return value.clamp_min(0).sqrt(), used
