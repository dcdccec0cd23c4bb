"""Whole-network local Lipschitz constant ||J_f(x)||_2 of every sample (docs/science.md §1.5, paper
Fig. 4).

For a classifier f: [0, 1]^n -> R^C and each image x_b of a batch, J_b = d f(x_b) / d x_b is
C x n. The samples are independent (eval mode), so one forward of the batch gives every J_b at
once. Three routes compute sigma_1(J_b):

- ``exact``: C vector-Jacobian products (one per logit, each for the whole batch, on one retained
  graph) give J_b; sigma_1^2 is the top eigenvalue of the C x C Gram matrix J_b J_b^T
  (``eigvalsh`` in float64). Cost: one forward + C input-only backward passes.
- ``lanczos``: Lanczos on J_b J_b^T in the C-dimensional logit space; each step is one VJP (on
  the retained graph) and one JVP (forward-mode, ``torch.func.jvp``). Converges in a few
  steps; exact in at most C steps in exact arithmetic.
- ``power``: power iteration on J_b J_b^T (the paper's method for Fig. 4), same cost per step,
  slower convergence.

``auto`` takes ``exact`` when C <= :data:`EXACT_MAX_CLASSES`, else ``lanczos``: the exact route
costs a fixed part plus one VJP per class, Lanczos a fixed number of steps, and the threshold is
where they cross (figures: docs/benchmarks.md, "Why these designs").

timm's fused attention kernel has no forward-mode derivative, so the iterative routes switch it
off (:func:`lipsweep.vit.attention.set_fused_attention`) around their JVPs and restore it after;
the exact route keeps it (first-order VJPs only). The model is put in eval mode with its
parameters frozen for the measurement (:func:`measurement_mode`); every submodule's mode and
every parameter's ``requires_grad`` are restored after.

Example::

    >>> vals = jacobian_spectral_norm(model, x, iters=100)          # (B,)
    >>> res = jacobian_norm_result(model, x, 100, route="lanczos")
    >>> res.route, res.values.shape
    ('lanczos', torch.Size([64]))
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional

import torch
from torch import nn

from lipsweep.lipschitz._krylov import (
    KrylovResult,
    lanczos_top_eigenvalue,
    linalg_device,
    power_top_eigenvalue,
    start_vector,
)
from lipsweep.vit.attention import restore_fused_attention, set_fused_attention
from lipsweep.vit.models import frozen_eval

ROUTES = ("auto", "exact", "lanczos", "power")
"""Accepted values of ``route``."""

EXACT_MAX_CLASSES = 32
"""``auto`` uses the exact route up to this many logits, Lanczos above (see module docstring)."""

DEFAULT_TOL = 1e-3
"""Relative tolerance of the iterative routes on sigma_1^2 (see :mod:`._krylov`)."""


@dataclass
class JacobianNormResult:
    """Per-sample ||J_f(x)||_2 and how it was obtained."""

    values: torch.Tensor
    """(B,) spectral norms."""
    route: str
    """'exact', 'lanczos' or 'power' (never 'auto')."""
    iterations: torch.Tensor
    """(B,) operator applications per sample (C for the exact route)."""
    converged: torch.Tensor
    """(B,) bool; always True for the exact route."""


def resolve_route(route: str, num_classes: int) -> str:
    """The concrete route ``auto`` stands for with ``num_classes`` logits."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {list(ROUTES)}, got {route!r}")
    if route == "auto":
        return "exact" if num_classes <= EXACT_MAX_CLASSES else "lanczos"
    return route


@contextlib.contextmanager
def measurement_mode(model: nn.Module, fused: Optional[bool] = None) -> Iterator[None]:
    """Eval mode, frozen parameters (and optionally the fused-attention flag) for the duration;
    each module's mode, each parameter's ``requires_grad`` and the flags are restored.

    Every measurement differentiates with respect to its input only. With the parameters
    frozen, the forward passes record no graph towards the weights: the VJP's forward saves
    no activations for weight gradients and the JVP's forward (``torch.func.jvp``) builds no
    backward graph at all (figures: docs/benchmarks.md, "Hot path").
    """
    flags = set_fused_attention(model, fused) if fused is not None else None
    try:
        with frozen_eval(model):
            yield
    finally:
        if flags is not None:
            restore_fused_attention(model, flags)


def _check_args(model: nn.Module, x: torch.Tensor, iters: int, tol: float) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not torch.is_tensor(x) or x.dim() < 2 or x.shape[0] == 0:
        raise ValueError("x must be a non-empty batch tensor (B, ...)")
    if not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor, got {x.dtype}")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive integer, got {iters!r}")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")


def _forward(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xg = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = model(xg)
    if out.dim() != 2 or out.shape[0] != x.shape[0]:
        raise ValueError(f"model must map (B, ...) to logits (B, C), got {tuple(out.shape)}")
    return xg, out


def _exact(xg: torch.Tensor, out: torch.Tensor, eigh_device: torch.device) -> JacobianNormResult:
    """C batched VJPs on one graph, then the top eigenvalue of the C x C Gram matrix (its
    eigvalsh on ``eigh_device``)."""
    b, c = out.shape
    rows = []
    for k in range(c):
        (g,) = torch.autograd.grad(out[:, k].sum(), xg, retain_graph=k < c - 1)
        rows.append(g.reshape(b, -1))  # row k of every J_b
    jac = torch.stack(rows, 1).double()  # (B, C, n)
    gram = jac @ jac.transpose(1, 2)  # (B, C, C)
    top = torch.linalg.eigvalsh(gram.to(eigh_device))[:, -1].to(gram.device).clamp_min(0)
    return JacobianNormResult(
        top.sqrt().to(xg.dtype),
        "exact",
        torch.full((b,), c, dtype=torch.int64),
        torch.ones(b, dtype=bool),
    )


def _iterative(
    model: nn.Module,
    xg: torch.Tensor,
    out: torch.Tensor,
    iters: int,
    tol: float,
    route: str,
    eigh_device: torch.device,
) -> JacobianNormResult:
    """Lanczos / power on u -> J J^T u in logit space: one VJP (retained graph) + one JVP."""
    b, c = out.shape
    xd = xg.detach()

    def op(u: torch.Tensor) -> torch.Tensor:
        (vt,) = torch.autograd.grad(out, xg, u.to(out.dtype), retain_graph=True)  # J^T u
        flags = set_fused_attention(model, False)  # the fused kernel has no forward AD
        try:
            _, ju = torch.func.jvp(model, (xd,), (vt,))  # J J^T u
        finally:
            restore_fused_attention(model, flags)
        return ju.detach()

    u0 = start_vector(b, c, out.dtype, out.device)
    if route == "lanczos":
        res: KrylovResult = lanczos_top_eigenvalue(op, u0, iters, tol, eigh_device)
    else:
        res = power_top_eigenvalue(op, u0, iters, tol)
    return JacobianNormResult(res.value.clamp_min(0).sqrt(), route, res.iterations, res.converged)


def jacobian_norm_result(
    model: nn.Module,
    x: torch.Tensor,
    iters: int,
    *,
    route: str = "auto",
    tol: float = DEFAULT_TOL,
    batch_size: Optional[int] = None,
    linalg_placement: str = "auto",
) -> JacobianNormResult:
    """||J_f(x_b)||_2 for every sample, with the route that ran (docs/science.md §1.5).

    Args:
        model: maps a batch (B, ...) to logits (B, C); samples must be independent in eval mode.
        x: (B, ...) inputs (pixels in [0, 1] for lipsweep models).
        iters: cap on operator applications of the iterative routes (ignored by ``exact``).
        route: 'auto', 'exact', 'lanczos' or 'power'.
        tol: relative tolerance of the iterative routes on sigma_1^2.
        batch_size: evaluate in chunks of this many samples (None: all at once).
        linalg_placement: where the Gram eigvalsh / Ritz eigh run (``_krylov.LINALG_DEVICES``).
    """
    _check_args(model, x, iters, tol)
    eigh_dev = linalg_device(x.device, linalg_placement)
    if route not in ROUTES:
        raise ValueError(f"route must be one of {list(ROUTES)}, got {route!r}")
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    step = batch_size or x.shape[0]
    parts = []
    with measurement_mode(model):
        for i in range(0, x.shape[0], step):
            xg, out = _forward(model, x[i : i + step])
            route_b = resolve_route(route, out.shape[1])
            parts.append(
                _exact(xg, out, eigh_dev)
                if route_b == "exact"
                else _iterative(model, xg, out, iters, tol, route_b, eigh_dev)
            )
            del xg, out
    return JacobianNormResult(
        torch.cat([p.values for p in parts]),
        parts[0].route,
        torch.cat([p.iterations for p in parts]).cpu(),
        torch.cat([p.converged for p in parts]).cpu(),
    )


def jacobian_spectral_norm(
    model: nn.Module,
    x: torch.Tensor,
    iters: int,
    *,
    route: str = "auto",
    tol: float = DEFAULT_TOL,
    batch_size: Optional[int] = None,
) -> torch.Tensor:
    """||J_f(x_b)||_2 of the logits w.r.t. the input, one value per sample: shape (B,).

    contract (docs/contract.md). See :func:`jacobian_norm_result` for the arguments and for the
    route used.
    """
    return jacobian_norm_result(model, x, iters, route=route, tol=tol, batch_size=batch_size).values
