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
from lipsweep.lipschitz.margin import logit_margin
from lipsweep.vit.attention import restore_fused_attention, set_fused_attention
from lipsweep.vit.models import frozen_eval
from lipsweep.vit.precision import tf32_matmuls

ROUTES = ("auto", "exact", "lanczos", "power")
"""Accepted values of ``route``."""

PRECISIONS = ("auto", "fp32", "tf32")
"""Accepted values of ``precision`` (:func:`resolve_precision`)."""

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
    margins: torch.Tensor
    """(B,) top logit minus the runner-up, from the measurement's own forward
    (:func:`~lipsweep.lipschitz.margin.logit_margin`)."""


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
    backward graph at all (figures: docs/benchmarks.md, "The train step's hot path").
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


def resolve_precision(precision: str, device: torch.device, route: str = "exact") -> str:
    """The concrete precision ``auto`` stands for: 'tf32' for the exact route on CUDA, else
    'fp32'. On an H100 (docs/benchmarks.md, "Lipschitz estimates") the exact route's TF32
    VJPs with the fp32 Rayleigh quotient deviated 5e-7 from strict fp32, the iterative routes'
    TF32 products up to 4e-3: above their tolerance, so they stay fp32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return "tf32" if device.type == "cuda" and route == "exact" else "fp32"
    return precision


class LogitGram:
    """u -> J_b J_b^T u for every image b of a batch, J_b = d f(x_b) / d x_b (C x n), with
    reverse-mode autograd only (a :class:`~lipsweep.lipschitz._krylov.RowOperator`).

    One forward (strict fp32) records the graph; one backward with ``create_graph`` records
    g(u) = J^T u as a function of a cotangent leaf u. g is linear in u, so backpropagating v
    through it gives d<g(u), v>/du = J v: the forward-mode product as a reverse pass over
    recorded tensors, with no second forward. Each application is two reverse passes, J^T u
    on the forward's graph and J (J^T u) on g's. The attention must run unfused (a fused
    kernel's backward is not differentiable: :func:`measurement_mode` with ``fused=False``).
    With ``tf32`` the two passes use TF32 matmuls; the forward, g and :meth:`vjp` are fp32.
    """

    def __init__(self, model: nn.Module, x: torch.Tensor, tf32: bool) -> None:
        self.model, self.x, self.tf32 = model, x, tf32
        with tf32_matmuls(False):
            self.xg, self.out = _forward(model, x)
            self.cotangent = torch.zeros_like(self.out, requires_grad=True)
            with torch.enable_grad():
                (self.g,) = torch.autograd.grad(
                    self.out, self.xg, self.cotangent, create_graph=True
                )

    def vjp(self, u: torch.Tensor) -> torch.Tensor:
        """J^T u, (B, C) -> (B, ...), in strict fp32 (the graph is kept)."""
        with tf32_matmuls(False):
            (vt,) = torch.autograd.grad(self.out, self.xg, u.to(self.out.dtype), retain_graph=True)
        return vt

    def __call__(self, u: torch.Tensor) -> torch.Tensor:
        with tf32_matmuls(self.tf32):
            (vt,) = torch.autograd.grad(self.out, self.xg, u.to(self.out.dtype), retain_graph=True)
            (ju,) = torch.autograd.grad(self.g, self.cotangent, vt, retain_graph=True)
        return ju.detach()

    def restrict(self, keep: torch.Tensor) -> "LogitGram":
        """The operator of images ``keep`` alone (a new, smaller graph)."""
        return LogitGram(self.model, self.x.index_select(0, keep), self.tf32)


def _refined(gram_vjp, vector: torch.Tensor) -> torch.Tensor:
    """||J^T y||^2 in strict fp32 for each unit vector y: the Rayleigh quotient of y, a lower
    bound on sigma_1^2 whose error is quadratic in y's (TF32) error."""
    return gram_vjp(vector).flatten(1).double().pow(2).sum(1)


def _exact(
    xg: torch.Tensor, out: torch.Tensor, eigh_device: torch.device, tf32: bool
) -> JacobianNormResult:
    """C batched VJPs on one graph, then the top eigenvalue of the C x C Gram matrix (its
    eigh on ``eigh_device``). With ``tf32`` the VJPs use TF32 matmuls and the value is the
    strict-fp32 Rayleigh quotient of the Gram's top eigenvector (:func:`_refined`)."""
    b, c = out.shape
    rows = []
    with tf32_matmuls(tf32):
        for k in range(c):
            (g,) = torch.autograd.grad(out[:, k].sum(), xg, retain_graph=tf32 or k < c - 1)
            rows.append(g.reshape(b, -1))  # row k of every J_b
    jac = torch.stack(rows, 1).double()  # (B, C, n)
    gram = jac @ jac.transpose(1, 2)  # (B, C, C)
    evals, evecs = torch.linalg.eigh(gram.to(eigh_device))
    if tf32:
        y = evecs[:, :, -1].to(device=out.device, dtype=out.dtype)

        def vjp(u: torch.Tensor) -> torch.Tensor:
            with tf32_matmuls(False):
                return torch.autograd.grad(out, xg, u)[0]

        top = _refined(vjp, y)
    else:
        top = evals[:, -1].to(gram.device)
    return JacobianNormResult(
        top.clamp_min(0).sqrt().to(xg.dtype),
        "exact",
        torch.full((b,), c, dtype=torch.int64),
        torch.ones(b, dtype=bool),
        logit_margin(out.detach().float()),
    )


SHRINK = 0.5
"""The iterative routes go on with the images still iterating alone once they are at most this
share of the batch (:func:`~lipsweep.lipschitz._krylov.lanczos_top_eigenvalue`): a batch then
costs about the mean of its images' iterations, not the maximum."""


def _iterative(
    model: nn.Module, x: torch.Tensor, iters: int, tol: float, route: str, tf32: bool
) -> JacobianNormResult:
    """Lanczos / power on u -> J J^T u in logit space (:class:`LogitGram`). With ``tf32`` each
    value is the strict-fp32 Rayleigh quotient of the converged vector (:func:`_refined`)."""
    gram = LogitGram(model, x, tf32)
    b, c = gram.out.shape
    u0 = start_vector(b, c, gram.out.dtype, gram.out.device)
    if route == "lanczos":
        res: KrylovResult = lanczos_top_eigenvalue(
            gram, u0, iters, tol, keep_vectors=tf32, shrink=SHRINK
        )
    else:
        res = power_top_eigenvalue(gram, u0, iters, tol, keep_vectors=tf32)
    value = res.value.double()
    if tf32:
        assert res.vector is not None
        value = _refined(gram.vjp, res.vector)
    return JacobianNormResult(
        value.clamp_min(0).sqrt().to(x.dtype),
        route,
        res.iterations,
        res.converged,
        logit_margin(gram.out.detach().float()),
    )


def jacobian_norm_result(
    model: nn.Module,
    x: torch.Tensor,
    iters: int,
    *,
    route: str = "auto",
    tol: float = DEFAULT_TOL,
    batch_size: Optional[int] = None,
    linalg_placement: str = "auto",
    precision: str = "auto",
) -> JacobianNormResult:
    """||J_f(x_b)||_2 for every sample, with the route that ran (docs/science.md §1.5).

    Args:
        model: maps a batch (B, ...) to logits (B, C); samples must be independent in eval mode.
        x: (B, ...) inputs (pixels in [0, 1] for lipsweep models).
        iters: cap on operator applications of the iterative routes (ignored by ``exact``).
        route: 'auto', 'exact', 'lanczos' or 'power'.
        tol: relative tolerance of the iterative routes on sigma_1^2.
        batch_size: evaluate in chunks of this many samples (None: all at once).
        linalg_placement: where the exact route's Gram eigh runs (``_krylov.LINALG_DEVICES``).
        precision: 'fp32', 'tf32' (the reverse passes in TF32 matmuls, each value then the
            strict-fp32 Rayleigh quotient of its converged vector) or 'auto'
            (:func:`resolve_precision`).
    """
    _check_args(model, x, iters, tol)
    eigh_dev = linalg_device(x.device, linalg_placement)
    if route not in ROUTES:
        raise ValueError(f"route must be one of {list(ROUTES)}, got {route!r}")
    resolve_precision(precision, x.device)  # validates before any work
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    step = batch_size or x.shape[0]
    parts = []
    concrete = route
    if route == "auto":  # the number of logits decides
        with measurement_mode(model), torch.no_grad():
            concrete = resolve_route(route, model(x[:1]).shape[-1])
    tf32 = resolve_precision(precision, x.device, concrete) == "tf32"
    # the iterative routes differentiate the VJP's graph once more: unfused attention
    with measurement_mode(model, fused=None if concrete == "exact" else False):
        for i in range(0, x.shape[0], step):
            xb = x[i : i + step]
            if concrete == "exact":
                with tf32_matmuls(False):
                    xg, out = _forward(model, xb)
                parts.append(_exact(xg, out, eigh_dev, tf32))
                del xg, out
            else:
                parts.append(_iterative(model, xb, iters, tol, concrete, tf32))
    return JacobianNormResult(
        torch.cat([p.values for p in parts]),
        parts[0].route,
        torch.cat([p.iterations for p in parts]).cpu(),
        torch.cat([p.converged for p in parts]).cpu(),
        torch.cat([p.margins for p in parts]),
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
