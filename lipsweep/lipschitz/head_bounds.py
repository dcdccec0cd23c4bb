"""Local Lipschitz bounds of one attention head against its exact Jacobian norm (paper Thm 1-3,
Fig. 6; docs/science.md §1.4).

A head of layer l is the map Attn(X) = softmax(X A X^T) X W_V from the LayerNorm output X
(N x D) to N x d (paper eq. 2), with A = W_Q W_K^T / sqrt(d) and W_Q, W_K, W_V (D x d) the
head's slices of timm's fused ``qkv`` Linear: q = X @ W_Q where W_Q = qkv.weight[h d:(h+1) d].T,
K at rows D + h d, V at rows 2 D + h d (out_features x in_features, hence the transpose).
Norms are on vec(X) -> vec(Attn(X)) (Frobenius in, Frobenius out); ||.|| is the spectral norm.

- Thm 1 (Hu et al. 2024): N (N+1) (||X||_F + R)^2 (||W_V|| ||W_Q|| ||W_K|| + ||W_V||), R = 0
  "at X". As the paper states it, this is NOT a bound for every X: at X = 0 the head's Jacobian
  is P (x) W_V with P = 11^T / N, norm ||W_V||, while Thm 1 gives 0. Through Thm 3
  (||P|| <= sqrt(N), ||M|| <= 1/2, ||A|| <= ||W_Q|| ||W_K|| / sqrt(d)) it does hold whenever
  N (N+1) ||X||_F^2 >= sqrt(N), i.e. for every LayerNorm output in practice (tests check both).
- Thm 2 (Castin et al. 2024, Thm 3.3): sqrt(3) ||W_V|| (||A||^2 R^4 (4N+1) + N)^(1/2) on the
  ball of token norm R, taken at R = max_i ||X_i||.
- Thm 3 (this paper, eq. 3): ||W_V|| (||P|| + 2 ||X||^2 ||A|| max_i ||M(P_i)||), and its
  computable form with g_1(P_i) >= ||M(P_i)|| (Cor. 1).
- Exact: ||J_Attn(X)||_2 by Lanczos on J J^T (the head's VJP and JVP in closed form,
  :class:`HeadLinearization`, checked against autograd), or the full autograd Jacobian
  (``torch.func.jacrev``) for small heads.

With q/k/v biases (the paper removes them), the bounds use the paper's Remark 2: X -> [X 1]
and W -> [W; b]; the Jacobian w.r.t. X is a block of the one w.r.t. [X 1], so they stay bounds.
All quantities are computed in float64. The spectral norms of W_Q, W_K, W_V, A (D x D, rank
<= d) and X come from their square QR factors (||A|| = ||R_Q R_K^T|| / sqrt(d)), not from SVDs
of the full matrices (figures: docs/benchmarks.md, "The train step's hot path").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from lipsweep.lipschitz._krylov import (
    LINALG_DEVICES,  # noqa: F401 - re-exported: where the small decompositions run
    lanczos_top_eigenvalue,
    linalg_device,
    start_vector,
)
from lipsweep.lipschitz.softmax_jacobian import g1, softmax_jacobian_norm
from lipsweep.vit.attention import attention_probs
from lipsweep.vit.models import attention_modules

BOUNDS = ("thm1", "thm2", "thm3", "thm3_g1")
"""Names of the bounds, in the paper's order (Fig. 6 columns after 'exact')."""

HEAD_ROUTES = ("auto", "lanczos", "full")
FULL_MAX_ENTRIES = 2_000_000
"""``auto`` forms the full (N d) x (N D) Jacobian up to this many entries per head."""


@dataclass
class HeadWeights:
    """The per-head projections of one timm ``Attention`` block, as the paper writes them."""

    wq: torch.Tensor
    """(H, D, d): q_h = X @ wq[h] (+ bq[h])."""
    wk: torch.Tensor
    """(H, D, d)."""
    wv: torch.Tensor
    """(H, D, d)."""
    bq: Optional[torch.Tensor]
    """(H, d) or None."""
    bk: Optional[torch.Tensor]
    bv: Optional[torch.Tensor]
    scale: float
    """1 / sqrt(d) in timm."""

    @property
    def num_heads(self) -> int:
        return self.wq.shape[0]


def head_weights(attn: nn.Module, dtype: torch.dtype = torch.float64) -> HeadWeights:
    """Slice timm's fused ``qkv`` into per-head W_Q, W_K, W_V (D x d each) and biases."""
    for name in ("q_norm", "k_norm"):
        if not isinstance(getattr(attn, name, None), nn.Identity):
            raise ValueError(
                f"head bounds need plain dot-product attention; this block has "
                f"a non-identity {name} (qk_norm=True is not covered by Thm 1-3)"
            )
    h, d = attn.num_heads, attn.head_dim
    w = attn.qkv.weight.detach().to(dtype)  # (3 H d, D)
    dim = w.shape[1]
    wq, wk, wv = (
        w[i * h * d : (i + 1) * h * d].reshape(h, d, dim).transpose(1, 2) for i in range(3)
    )  # (H, D, d) each
    b = attn.qkv.bias
    if b is None:
        bq = bk = bv = None
    else:
        bq, bk, bv = b.detach().to(dtype).reshape(3, h, d).unbind(0)
    return HeadWeights(wq, wk, wv, bq, bk, bv, float(attn.scale))


def _proj(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
    """x (B, H, N, D) @ w (H, D, d) (+ b (H, d)) -> (B, H, N, d)."""
    out = x @ w
    return out if b is None else out + b[:, None, :]


def _per_head(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.unsqueeze(1).expand(-1, heads, -1, -1) if x.dim() == 3 else x


def head_probs(x: torch.Tensor, w: HeadWeights) -> torch.Tensor:
    """P = softmax(X A X^T) of every head: x (B, N, D) or (B, H, N, D) -> (B, H, N, N)."""
    xh = _per_head(x, w.num_heads)
    return attention_probs(_proj(xh, w.wq, w.bq), _proj(xh, w.wk, w.bk), w.scale)


def head_forward(x: torch.Tensor, w: HeadWeights) -> torch.Tensor:
    """Attn_h(X) = P X W_V of every head. x (B, N, D) shared, or (B, H, N, D) one per head;
    output (B, H, N, d)."""
    return head_probs(x, w) @ _proj(_per_head(x, w.num_heads), w.wv, w.bv)


def _augmented(
    x: torch.Tensor, w: HeadWeights
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(X, W_Q, W_K, W_V), with Remark 2's [X 1], [W; b] when the block has biases."""
    if w.bq is None:
        return x, w.wq, w.wk, w.wv
    x = torch.cat([x, x.new_ones(*x.shape[:-1], 1)], -1)
    return x, *(
        torch.cat([m, b[:, None, :]], 1) for m, b in ((w.wq, w.bq), (w.wk, w.bk), (w.wv, w.bv))
    )


def _spec_norm(m: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """Batched spectral norm of ``m`` (..., r, c) computed on ``dev``, returned on m's device."""
    return torch.linalg.matrix_norm(m.to(dev), 2).to(m.device)


def _r_factor(m: torch.Tensor) -> torch.Tensor:
    """A square (..., s, s) matrix with the singular values of ``m`` (..., r, c), s = min(r, c).

    The triangular R of m = Q R (of m^T when r < c), computed on m's device: Q has orthonormal
    columns, so ||R x|| = ||m x|| and the spectra agree; Householder QR is backward stable, so
    in float64 they agree to a few ulps of ||m||. A square ``m`` is returned as it is.
    """
    r, c = m.shape[-2:]
    if r == c:
        return m
    return torch.linalg.qr(m if r > c else m.transpose(-2, -1), mode="r").R


def head_bounds_at(
    x: torch.Tensor,
    w: HeadWeights,
    radius: float = 0.0,
    softmax_method: str = "secular",
    linalg_placement: str = "auto",
) -> dict[str, torch.Tensor]:
    """Thm 1, 2, 3 and 3-with-g_1 for every image and head at inputs ``x`` (B, N, D).

    ``radius`` is Thm 1's R (0: at X). ``linalg_placement`` picks where the small SVDs (and
    the 'eigvalsh' softmax norms) run, see LINALG_DEVICES; the QRs that shrink W_Q, W_K,
    W_V and X to their square R factors run on x's device. Returns name -> (B, H), float64, on
    x's device.
    """
    x = x.double()
    n = x.shape[1]
    dev = linalg_device(x.device, linalg_placement)
    p = head_probs(x, w)  # (B, H, N, N)
    xa, wq, wk, wv = _augmented(x, w)
    # W = Q R with R (H, d, d): ||W|| = ||R|| and ||W_Q W_K^T|| = ||R_Q R_K^T||, so no SVD of
    # a (D, D) matrix of rank <= d; the QRs run on x's device, the d x d SVDs on ``dev``.
    rq, rk, rv = (_r_factor(m) for m in (wq, wk, wv))  # (H, d, d)
    nq, nk, nv = (_spec_norm(m, dev) for m in (rq, rk, rv))  # (H,)
    a_norm = _spec_norm(rq @ rk.transpose(1, 2) * w.scale, dev)  # ||A||, A = W_Q W_K^T s
    x_fro = torch.linalg.matrix_norm(xa, "fro")[:, None]  # (B, 1)
    x_spec = _spec_norm(_r_factor(xa), dev)[:, None]  # (B, min(N, D), min(N, D)) via QR
    r_tok = xa.norm(dim=-1).amax(-1)[:, None]  # max_i ||X_i||
    p_spec = _spec_norm(p, dev)  # (B, H)
    p_m = p.to(dev) if softmax_method == "eigvalsh" else p
    m_max = softmax_jacobian_norm(p_m, softmax_method).amax(-1).to(x.device)  # max ||M(P_i)||
    g_max = g1(p).amax(-1)
    thm1 = n * (n + 1) * (x_fro + radius) ** 2 * (nv * nq * nk + nv)
    thm2 = math.sqrt(3) * nv * (a_norm**2 * r_tok**4 * (4 * n + 1) + n).sqrt()
    thm3 = nv * (p_spec + 2 * x_spec**2 * a_norm * m_max)
    thm3_g1 = nv * (p_spec + 2 * x_spec**2 * a_norm * g_max)
    return {"thm1": thm1, "thm2": thm2, "thm3": thm3, "thm3_g1": thm3_g1}


def _full_norm(x: torch.Tensor, w: HeadWeights) -> torch.Tensor:
    """||J||_2 from the full (N d) x (N D) Jacobian of every head, one (image, head) at a time."""
    b, n, dim = x.shape
    out = torch.empty(b, w.num_heads, dtype=x.dtype)
    for h in range(w.num_heads):
        wh = HeadWeights(
            *(
                t[h : h + 1] if t is not None else None
                for t in (w.wq, w.wk, w.wv, w.bq, w.bk, w.bv)
            ),
            w.scale,
        )
        for i in range(b):
            jac = torch.func.jacrev(lambda z: head_forward(z[None], wh)[0, 0])(x[i])
            out[i, h] = torch.linalg.matrix_norm(jac.reshape(-1, n * dim).cpu(), 2)
    return out


class HeadLinearization:
    """J and J^T of every head at X, from the cached Q, K, V and P of the forward pass.

    Closed forms (checked against ``torch.func.jvp``/``vjp`` in the tests), with
    S = Q K^T s and softmax's Jacobian applied row-wise as P o (dS - rowsum(P o dS)):

    - J dX = dP V + P dV, dP = P o (dS - rowsum(P o dS)), dS = (dQ K^T + Q dK^T) s,
      dQ = dX W_Q, dK = dX W_K, dV = dX W_V;
    - J^T G = dQ W_Q^T + dK W_K^T + dV W_V^T, dV = P^T G, dS = s P o (G V^T - rowsum(...)),
      dQ = dS K, dK = dS^T Q.

    They cost one forward's worth of matmuls each, about half of autograd's VJP + JVP (the
    JVP of ``torch.func`` recomputes the forward).
    """

    def __init__(self, x: torch.Tensor, w: HeadWeights) -> None:
        self.w = w
        xh = x.unsqueeze(1)  # (B, 1, N, D)
        self.q, self.k, self.v = (
            _proj(xh, m, b) for m, b in ((w.wq, w.bq), (w.wk, w.bk), (w.wv, w.bv))
        )  # (B, H, N, d)
        self.p = ((self.q * w.scale) @ self.k.transpose(-2, -1)).softmax(-1)  # (B, H, N, N)

    def _softmax_t(self, ds: torch.Tensor) -> torch.Tensor:
        return self.p * (ds - (self.p * ds).sum(-1, keepdim=True))

    def jvp(self, dx: torch.Tensor) -> torch.Tensor:
        """J dX for per-head tangents dX (B, H, N, D) -> (B, H, N, d)."""
        w = self.w
        dq, dk, dv = dx @ w.wq, dx @ w.wk, dx @ w.wv
        ds = (dq @ self.k.transpose(-2, -1) + self.q @ dk.transpose(-2, -1)) * w.scale
        return self._softmax_t(ds) @ self.v + self.p @ dv

    def vjp(self, g: torch.Tensor) -> torch.Tensor:
        """J^T G for per-head cotangents G (B, H, N, d) -> (B, H, N, D)."""
        w = self.w
        dv = self.p.transpose(-2, -1) @ g
        ds = self._softmax_t(g @ self.v.transpose(-2, -1)) * w.scale
        dq, dk = ds @ self.k, ds.transpose(-2, -1) @ self.q
        return dq @ w.wq.transpose(1, 2) + dk @ w.wk.transpose(1, 2) + dv @ w.wv.transpose(1, 2)


def _lanczos_norm(
    x: torch.Tensor, w: HeadWeights, iters: int, tol: float, eigh_device: torch.device
) -> torch.Tensor:
    """||J||_2 of every (image, head) at once: Lanczos on u -> J J^T u in output space."""
    b, n, _ = x.shape
    heads, d = w.num_heads, w.wv.shape[-1]
    lin = HeadLinearization(x, w)

    def op(u: torch.Tensor) -> torch.Tensor:
        return lin.jvp(lin.vjp(u.reshape(b, heads, n, d))).reshape(b * heads, n * d)

    u0 = start_vector(b * heads, n * d, x.dtype, x.device)
    res = lanczos_top_eigenvalue(op, u0, iters, tol, eigh_device)
    value = torch.where(res.converged, res.value, torch.full_like(res.value, math.nan))
    return value.clamp_min(0).sqrt().reshape(b, heads)  # NaN stays NaN


def head_exact_norm(
    x: torch.Tensor,
    w: HeadWeights,
    route: str = "auto",
    iters: int = 300,
    tol: float = 1e-8,
    linalg_placement: str = "auto",
) -> torch.Tensor:
    """||J_Attn(X)||_2 of every head at every input ``x`` (B, N, D) -> (B, H), float64.

    A head whose Lanczos did not meet ``tol`` within ``iters`` steps is NaN: its last Ritz
    value is only a lower bound, and an "exact" value must never be understated.
    ``linalg_placement``: where the Lanczos route's Ritz eigh runs (LINALG_DEVICES).
    """
    if route not in HEAD_ROUTES:
        raise ValueError(f"route must be one of {list(HEAD_ROUTES)}, got {route!r}")
    eigh_dev = linalg_device(x.device, linalg_placement)
    x = x.double()
    _, n, dim = x.shape
    if route == "auto":
        route = "full" if n * w.wv.shape[-1] * n * dim <= FULL_MAX_ENTRIES else "lanczos"
    return _full_norm(x, w) if route == "full" else _lanczos_norm(x, w, iters, tol, eigh_dev)


class AttentionInputs:
    """Forward-pre hooks on every timm ``Attention``: ``inputs[l]`` is block l's X (B, N, D)."""

    def __init__(self, model: nn.Module) -> None:
        self.blocks = list(attention_modules(model))
        if not self.blocks:
            raise ValueError("model has no timm Attention blocks")
        self.inputs: list[torch.Tensor] = []
        self._handles: list = []

    def _hook(self, _module: nn.Module, args: tuple) -> None:
        self.inputs.append(args[0].detach())

    def __enter__(self) -> "AttentionInputs":
        self.inputs = []
        self._handles = [b.register_forward_pre_hook(self._hook) for b in self.blocks]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


@torch.no_grad()
def _inputs_and_weights(
    model: nn.Module, x: torch.Tensor
) -> tuple[list[torch.Tensor], list[HeadWeights]]:
    with AttentionInputs(model) as rec:
        model(x)
    return rec.inputs, [head_weights(a) for a in rec.blocks]


def measure_head_bounds(
    model: nn.Module,
    x: torch.Tensor,
    route: str = "auto",
    iters: int = 300,
    tol: float = 1e-8,
    softmax_method: str = "secular",
    linalg_placement: str = "auto",
) -> dict[str, torch.Tensor]:
    """Exact head norms and Thm 1-3 bounds for every image, layer and head of ``model``.

    ``linalg_placement``: where the bounds' small SVDs and the Lanczos Ritz eigh run
    (LINALG_DEVICES; the GPU suite times 'cpu' against 'same').

    Returns ``{"head_exact", "head_thm1", "head_thm2", "head_thm3", "head_thm3_g1"}``, each
    (B, L, H) float64. The model is in eval mode during the measurement; its mode is restored.
    """
    from lipsweep.lipschitz.jacobian import measurement_mode

    with measurement_mode(model):
        inputs, weights = _inputs_and_weights(model, x)
    per_layer = []
    for xl, wl in zip(inputs, weights):
        row = {
            f"head_{k}": v
            for k, v in head_bounds_at(xl, wl, 0.0, softmax_method, linalg_placement).items()
        }
        with torch.enable_grad():  # jacrev for 'full'
            row["head_exact"] = head_exact_norm(xl, wl, route, iters, tol, linalg_placement).to(
                xl.device
            )
        per_layer.append(row)
    return {k: torch.stack([r[k] for r in per_layer], 1) for k in per_layer[0]}
