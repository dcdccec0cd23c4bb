"""Top eigenvalue of many small symmetric PSD operators at once: Lanczos and power iteration.

Both routines see a batch of independent operators through one callable ``op`` that maps
vectors (m, n) to (m, n), row r through operator r (e.g. u -> J_r J_r^T u for sample r). All
arithmetic is per row, the start vector is the same fixed vector for every row, and each row's
estimate is frozen at the first convergence check it passes, so a row's result does not depend on
the other rows in the batch (up to floating-point rounding in ``op``).

- Lanczos (three-term recurrence, no stored basis, so memory is O(m n)): the top Ritz value
  theta_j of the tridiagonal T_j increases to lambda_max; the row stops when the residual
  estimate beta_j |s_j| (s the top eigenvector of T_j) is <= tol * theta_j. Loss of orthogonality
  in finite precision only duplicates converged Ritz values; the top one stays accurate.
- Power iteration: v <- op(v) / ||op(v)||, Rayleigh quotient theta = v^T op(v); the row stops
  when the residual ||op(v) - theta v|| <= tol * theta (an eigenvalue lies within the residual
  of theta, and near the top the error lambda_max - theta is about residual^2 / gap, at most
  the residual). Stopping when theta changed by less than tol between steps (before issue 32)
  fired long before lambda_max when the top eigenvalues are close: 2% low, 20 times tol,
  flagged converged, on singular values 1, .99, .98, .97, .96, .5 x 5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

Operator = Callable[[torch.Tensor], torch.Tensor]

LINALG_DEVICES = ("auto", "cpu", "same")
"""Where the batched float64 SVD/eigh of small matrices run (``linalg_placement``): the head
bounds' SVDs, the Lanczos Ritz eigh of T_j and the logit Gram eigvalsh. 'cpu', 'same' (the
inputs' device), or 'auto': the CPU when the inputs are on CUDA, where batched decompositions
of tiny matrices launch many small kernels (issue 17; benchmarks/gpu_suite.py times both, rows
bounds_svd_*, ritz_eigh_*, lanczos_ritz_*), else the inputs' device. The values are the CPU's
either way on CPU inputs."""


def linalg_device(device: torch.device, placement: str = "auto") -> torch.device:
    """The device of the small decompositions for inputs on ``device`` (LINALG_DEVICES)."""
    if placement not in LINALG_DEVICES:
        raise ValueError(
            f"linalg_placement must be one of {list(LINALG_DEVICES)}, got {placement!r}"
        )
    if placement == "cpu" or (placement == "auto" and device.type == "cuda"):
        return torch.device("cpu")
    return device


_BREAKDOWN = 1e-12
"""beta_j <= _BREAKDOWN * theta_j means the Krylov space is invariant: theta_j is exact."""


@dataclass
class KrylovResult:
    """Top eigenvalue estimate per row, with the iteration it was frozen at."""

    value: torch.Tensor
    """(m,) estimated lambda_max of each operator (a lower bound for Lanczos and power)."""
    iterations: torch.Tensor
    """(m,) int64, operator applications used by each row."""
    converged: torch.Tensor
    """(m,) bool, whether each row met the tolerance within the cap."""


def start_vector(m: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The same unit vector for every row, from a fixed seed (batch-invariant by construction)."""
    g = torch.Generator().manual_seed(20240713)
    v = torch.randn(n, generator=g, dtype=torch.float64).abs() + 0.5  # no zero overlap with 1
    v = v / v.norm()
    return v.to(dtype=dtype, device=device).expand(m, n).clone()


def _check(iters: int, tol: float) -> None:
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive integer, got {iters!r}")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")


def _check_due(j: int) -> bool:
    """Convergence checks after every step up to 16, then every 4th (the T_j eigh grows as j^3)."""
    return j < 16 or j % 4 == 3


def lanczos_top_eigenvalue(
    op: Operator,
    v0: torch.Tensor,
    iters: int,
    tol: float,
    eigh_device: Optional[torch.device] = None,
) -> KrylovResult:
    """lambda_max of each row's operator by Lanczos; ``iters`` caps the operator applications.

    ``eigh_device``: where the Ritz eigh of T_j (m, j, j) runs (None: v0's device; see
    :func:`linalg_device`); the recurrence and the result stay on v0's device.
    """
    _check(iters, tol)
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
        w = w - (w * q).sum(1, keepdim=True) * q  # local re-orthogonalisation
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
            if last:
                break
            if bool(done.all()):
                break
        q_prev, beta_prev = q, beta
        q = w / beta.clamp_min(torch.finfo(w.dtype).tiny)[:, None]
    return KrylovResult(value.to(v0.dtype), used, done)


def _top_ritz(
    alphas: list[torch.Tensor], betas: list[torch.Tensor], eigh_device: Optional[torch.device]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top eigenvalue of T_j (m, j, j) and its residual estimate beta_j |s_j|, on the
    alphas' device; the eigh runs on ``eigh_device`` (None: the same)."""
    home = alphas[0].device
    dev = home if eigh_device is None else eigh_device
    a = torch.stack(alphas, 1).to(dev)  # (m, j)
    b = torch.stack(betas, 1).to(dev)  # (m, j)
    t = torch.diag_embed(a)
    if a.shape[1] > 1:
        off = torch.diag_embed(b[:, :-1], offset=1)
        t = t + off + off.transpose(1, 2)
    evals, evecs = torch.linalg.eigh(t)
    theta = evals[:, -1]
    resid = b[:, -1] * evecs[:, -1, -1].abs()
    return theta.to(home), resid.to(home)


def power_top_eigenvalue(op: Operator, v0: torch.Tensor, iters: int, tol: float) -> KrylovResult:
    """lambda_max of each row's PSD operator by power iteration (Rayleigh quotient), stopped
    on the residual (module docstring)."""
    _check(iters, tol)
    m, _ = v0.shape
    v = v0 / v0.norm(dim=1, keepdim=True)
    value = torch.zeros(m, dtype=torch.float64, device=v0.device)
    used = torch.full((m,), iters, dtype=torch.int64, device=v0.device)
    done = torch.zeros(m, dtype=torch.bool, device=v0.device)
    for j in range(iters):
        w = op(v)
        theta_w = (w * v).sum(1)
        resid = (w - theta_w[:, None] * v).norm(dim=1).double()
        theta = theta_w.double()
        norm = w.norm(dim=1)
        ok = (resid <= tol * theta.abs()) | (norm.double() == 0)
        last = j == iters - 1
        new = ~done & (ok | last)
        value = torch.where(new, theta, value)
        used = torch.where(new & ok, torch.full_like(used, j + 1), used)
        done = done | ok
        if last or bool(done.all()):
            break
        v = w / norm.clamp_min(torch.finfo(w.dtype).tiny)[:, None]
    return KrylovResult(value.to(v0.dtype), used, done)
