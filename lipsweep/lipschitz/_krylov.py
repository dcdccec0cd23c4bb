"""Top eigenvalue of many small symmetric PSD operators at once: Lanczos and power iteration.

Both routines see a batch of independent operators through one callable ``op`` that maps
vectors (m, n) to (m, n), row r through operator r (e.g. u -> J_r J_r^T u for sample r). All
arithmetic is per row, the start vector is the same fixed vector for every row, and each row's
estimate is frozen at the first convergence check it passes, so a row's result does not depend on
the other rows in the batch (up to floating-point rounding in ``op``).

- Lanczos (three-term recurrence; the basis is stored only when Ritz vectors are asked for):
  the top Ritz value theta_j of the tridiagonal T_j increases to lambda_max; the row stops when
  the Ritz pair's residual estimate (beta_j |s_j| for an exact eigenvector s of T_j) is
  <= tol * theta_j. Loss of orthogonality in finite precision only duplicates converged Ritz
  values; the top one stays accurate. Rows that have converged can leave the batch
  (``shrink``), and on CUDA the loop reads the convergence flags one step late, while the
  device runs the next step, so the host never waits for the device between steps.
- Power iteration: v <- op(v) / ||op(v)||, Rayleigh quotient theta = v^T op(v); the row stops
  when the residual ||op(v) - theta v|| <= tol * theta (an eigenvalue lies within the residual
  of theta, and near the top the error lambda_max - theta is about residual^2 / gap, at most
  the residual). A test on the change of theta between steps instead fires long before
  lambda_max when the top eigenvalues are close: 2% low, 20 times tol, flagged converged, on
  singular values 1, .99, .98, .97, .96, .5 x 5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol

import torch

Operator = Callable[[torch.Tensor], torch.Tensor]

LINALG_DEVICES = ("auto", "cpu", "same")
"""Where the batched float64 SVD/eigh of small matrices run (``linalg_placement``): the head
bounds' SVDs and Ritz eigh, and the logit Gram eigvalsh. 'cpu', 'same' (the inputs' device),
or 'auto': the CPU when the inputs are on CUDA, where batched decompositions of tiny matrices
launch many small kernels (benchmarks/gpu_suite.py times both, rows bounds_svd_*, ritz_eigh_*,
lanczos_ritz_*), else the inputs' device. The values are the CPU's either way on CPU inputs.
The logit Lanczos of :mod:`~lipsweep.lipschitz.jacobian` keeps its T_j on the device
(:func:`top_ritz_pair`)."""


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

_SQUARINGS = 40
"""Repeated squarings in :func:`_top_vector_by_squaring`: T^(2^40), 10^12 power steps."""


@dataclass
class KrylovResult:
    """Top eigenvalue estimate per row, with the iteration it was frozen at."""

    value: torch.Tensor
    """(m,) estimated lambda_max of each operator (a lower bound for Lanczos and power)."""
    iterations: torch.Tensor
    """(m,) int64, operator applications used by each row."""
    converged: torch.Tensor
    """(m,) bool, whether each row met the tolerance within the cap."""
    vector: Optional[torch.Tensor] = None
    """(m, n) unit vector whose Rayleigh quotient is ``value`` (``keep_vectors``), else None."""


class RowOperator(Protocol):
    """A batch of operators (row r of ``u`` through operator r) that can drop rows.

    ``restrict(keep)`` returns the operator of rows ``keep`` (int64 indices into the current
    rows) alone: Lanczos calls it once most rows have converged (``shrink``), so the rows
    still iterating no longer pay for the finished ones.
    """

    def __call__(self, u: torch.Tensor) -> torch.Tensor: ...

    def restrict(self, keep: torch.Tensor) -> "RowOperator": ...


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


class _Flags:
    """The working rows' ``done`` flags, on the host. On CUDA the copy is queued (pinned
    memory and an event) and read after the next operator application has been queued."""

    def __init__(self, done: torch.Tensor) -> None:
        self.event: Optional[torch.cuda.Event] = None
        if done.device.type == "cuda":
            self.host = torch.empty(done.shape, dtype=torch.bool, pin_memory=True)
            self.host.copy_(done, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = done.cpu()

    def get(self) -> torch.Tensor:
        if self.event is not None:
            self.event.synchronize()
        return self.host


def lanczos_top_eigenvalue(
    op: Operator,
    v0: torch.Tensor,
    iters: int,
    tol: float,
    eigh_device: Optional[torch.device] = None,
    *,
    keep_vectors: bool = False,
    shrink: Optional[float] = None,
) -> KrylovResult:
    """lambda_max of each row's operator by Lanczos; ``iters`` caps the operator applications.

    Args:
        op: the batch of operators; a :class:`RowOperator` where ``shrink`` is given.
        v0: (m, n) start vectors.
        eigh_device: where the Ritz eigh of T_j (m, j, j) runs (:func:`linalg_device`); None:
            v0's device, by LAPACK on the CPU and by repeated squaring on CUDA
            (:func:`top_ritz_pair`). The recurrence and the result stay on v0's device.
        keep_vectors: store the Lanczos basis (m, steps, n) and return each row's Ritz vector.
        shrink: once the rows still iterating are at most this share of the working rows,
            go on with those rows alone (``op.restrict``). Frozen rows keep their results.
    """
    _check(iters, tol)
    if shrink is not None and not (0 < shrink < 1 and hasattr(op, "restrict")):
        raise ValueError("shrink needs a share in (0, 1) and an operator with restrict()")
    m, n = v0.shape
    dev = v0.device
    steps = min(iters, n)
    rows = torch.arange(m, device=dev)  # working row -> result row
    q = v0 / v0.norm(dim=1, keepdim=True)
    q_prev = torch.zeros_like(q)
    beta_prev = torch.zeros(m, dtype=v0.dtype, device=dev)
    alphas = torch.zeros(m, steps, dtype=torch.float64, device=dev)
    betas = torch.zeros_like(alphas)
    basis = v0.new_zeros((m, steps, n)) if keep_vectors else None
    value = torch.zeros(m, dtype=torch.float64, device=dev)
    used = torch.full((m,), steps, dtype=torch.int64, device=dev)
    done = torch.zeros(m, dtype=torch.bool, device=dev)
    vector = torch.zeros_like(v0) if keep_vectors else None
    late = dev.type == "cuda"  # queue the next step before reading a check's flags
    flags: Optional[_Flags] = None
    queued: Optional[torch.Tensor] = None
    for j in range(steps):
        w, queued = queued, None
        if flags is not None:  # the last check's flags; on a GPU, read while w is computed
            finished, flags = flags.get(), None
            if bool(finished.all()):
                break
            live = (~finished).nonzero().flatten()
            if shrink is not None and len(live) <= shrink * len(finished):
                keep = live.to(dev)
                rows, q, q_prev, beta_prev, alphas, betas = (
                    t.index_select(0, keep) for t in (rows, q, q_prev, beta_prev, alphas, betas)
                )
                basis = None if basis is None else basis.index_select(0, keep)
                w = None if w is None else w.index_select(0, keep)
                op = op.restrict(keep)  # type: ignore[attr-defined]
        if w is None:
            w = op(q)
        if basis is not None:
            basis[:, j] = q
        alpha = (w * q).sum(1)
        w = w - alpha[:, None] * q - beta_prev[:, None] * q_prev
        w = w - (w * q).sum(1, keepdim=True) * q  # local re-orthogonalisation
        beta = w.norm(dim=1)
        alphas[:, j] = alpha.double()
        betas[:, j] = beta.double()
        last = j == steps - 1
        if _check_due(j) or last:
            theta, resid, s = top_ritz_pair(alphas[:, : j + 1], betas[:, : j + 1], eigh_device)
            ok = (resid <= tol * theta) | (beta.double() <= _BREAKDOWN * theta.clamp_min(1e-300))
            was = done[rows]
            new = ~was & (ok | last)
            value[rows] = torch.where(new, theta, value[rows])
            used[rows] = torch.where(new & ok, torch.full_like(rows, j + 1), used[rows])
            if basis is not None and vector is not None:
                y = torch.einsum("mk,mkn->mn", s.to(basis.dtype), basis[:, : j + 1])
                vector[rows] = torch.where(new[:, None], y, vector[rows])
            done[rows] = was | ok
            if last:
                break
            flags = _Flags(done[rows])
        q_prev, beta_prev = q, beta
        q = w / beta.clamp_min(torch.finfo(w.dtype).tiny)[:, None]
        if late and flags is not None:
            queued = op(q)
    return KrylovResult(value.to(v0.dtype), used, done, vector)


def top_ritz_pair(
    alphas: torch.Tensor, betas: torch.Tensor, eigh_device: Optional[torch.device] = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top eigenpair of each tridiagonal T_j (alphas (m, j) on the diagonal, betas[:, :-1]
    beside it) as (theta (m,), residual estimate (m,), unit vector s (m, j)), float64, on the
    alphas' device.

    The residual estimate is sqrt(||T_j s - theta s||^2 + (beta_j s_j)^2): the norm of the
    Ritz pair's residual in the operator's space (Q orthonormal), so an eigenvalue of the
    operator lies within it of theta; for an exact eigenvector of T_j it is beta_j |s_j|. s
    comes from LAPACK's eigh on the CPU or on ``eigh_device``; on CUDA without one, from
    repeated squaring (:func:`_top_vector_by_squaring`), which never synchronises with the host
    and launches no batched eigensolver.
    """
    home = alphas.device
    t = torch.diag_embed(alphas)
    if alphas.shape[1] > 1:
        off = torch.diag_embed(betas[:, :-1], offset=1)
        t = t + off + off.transpose(1, 2)
    if home.type == "cuda" and eigh_device is None:
        s = _top_vector_by_squaring(t)
    else:
        dev = home if eigh_device is None else eigh_device
        s = torch.linalg.eigh(t.to(dev))[1][:, :, -1].to(home)
    ts = (t @ s[:, :, None])[:, :, 0]
    theta = (s * ts).sum(1)
    inner = (ts - theta[:, None] * s).norm(dim=1)
    resid = torch.sqrt(inner**2 + (betas[:, -1] * s[:, -1]) ** 2)
    return theta, resid, s


def _top_vector_by_squaring(t: torch.Tensor) -> torch.Tensor:
    """Unit top eigenvector of each symmetric PSD t (m, k, k): M <- M^2 / ||M||_F from
    t / ||t||_F, :data:`_SQUARINGS` times, then M r for a fixed positive r. Where the top
    eigenvalues tie to within the 2^-40th power, s mixes their eigenvectors; the theta and
    residual :func:`top_ritz_pair` computes are those of that s, so the test stays honest."""
    tiny = torch.finfo(t.dtype).tiny
    mat = t / t.flatten(1).norm(dim=1).clamp_min(tiny)[:, None, None]
    for _ in range(_SQUARINGS):
        mat = mat @ mat
        mat = mat / mat.flatten(1).norm(dim=1).clamp_min(tiny)[:, None, None]
    r = torch.linspace(1.0, 2.0, t.shape[1], dtype=t.dtype, device=t.device)
    s = mat @ r
    norm = s.norm(dim=1, keepdim=True)
    e1 = torch.zeros_like(s)
    e1[:, 0] = 1.0
    return torch.where(norm > 0, s / norm.clamp_min(tiny), e1)


def power_top_eigenvalue(
    op: Operator, v0: torch.Tensor, iters: int, tol: float, *, keep_vectors: bool = False
) -> KrylovResult:
    """lambda_max of each row's PSD operator by power iteration (Rayleigh quotient), stopped
    on the residual (module docstring); ``keep_vectors``: return the iterate of each row's
    estimate."""
    _check(iters, tol)
    m, _ = v0.shape
    v = v0 / v0.norm(dim=1, keepdim=True)
    value = torch.zeros(m, dtype=torch.float64, device=v0.device)
    used = torch.full((m,), iters, dtype=torch.int64, device=v0.device)
    done = torch.zeros(m, dtype=torch.bool, device=v0.device)
    vector = torch.zeros_like(v) if keep_vectors else None
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
        if vector is not None:
            vector = torch.where(new[:, None], v, vector)
        done = done | ok
        if last or bool(done.all()):
            break
        v = w / norm.clamp_min(torch.finfo(w.dtype).tiny)[:, None]
    return KrylovResult(value.to(v0.dtype), used, done, vector)
