"""The Triton kernels of :mod:`._ranked_softmax_triton` (which documents them). Importing
this module imports Triton; ``TRITON_INTERPRET=1`` set before the import runs them on CPU."""

import triton
import triton.language as tl


@triton.jit
def scores(q, k, scale, cols, n, IEEE: tl.constexpr):
    if IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:  # bf16/fp16 values are exact in tf32: exact products, fp32 accumulation
        s = tl.dot(q, tl.trans(k), input_precision="tf32")
    s = s * scale
    return tl.where(cols[None, :] < n, s, float("-inf"))


@triton.jit
def load_rows(X, b, h, sb, sh, sn, sd, rows, dd, N, D):
    """Rows ``rows`` of the (N, D) matrix of sample b, head h (zero past N and D), float32."""
    mask = (rows[:, None] < N) & (dd[None, :] < D)
    return tl.load(X + b * sb + h * sh + rows[:, None] * sn + dd[None, :] * sd, mask, 0.0).to(
        tl.float32
    )


@triton.jit
def fwd(
    Q, K, MX, Z, POS, P,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd,
    H, N, D, scale,
    M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    g = tl.program_id(0)
    b = g // H
    h = g % H
    cols = tl.arange(0, BLOCK_N)
    dd = tl.arange(0, BLOCK_D)
    k = load_rows(K, b, h, skb, skh, skn, skd, cols, dd, N, D)
    for start in range(0, N, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < N
        q = load_rows(Q, b, h, sqb, sqh, sqn, sqd, rows, dd, N, D)
        s = scores(q, k, scale, cols, N, IEEE)
        mx = tl.max(s, 1)
        e = tl.exp(s - mx[:, None])
        z = tl.sum(e, 1)
        out = (g * N + rows) * M
        work = e
        for j in tl.static_range(M):
            cur = tl.max(work, 1)
            pos = tl.min(tl.where(work == cur[:, None], cols[None, :], BLOCK_N), 1)
            tl.store(POS + out + j, pos, rmask)
            tl.store(P + out + j, cur / z, rmask)
            work = tl.where(cols[None, :] == pos[:, None], -1.0, work)
        tl.store(MX + g * N + rows, mx, rmask)
        tl.store(Z + g * N + rows, z, rmask)


@triton.jit
def bwd(
    Q, K, MX, Z, POS, GRAD, DQ, DK,
    sqb, sqh, sqn, sqd, skb, skh, skn, skd,
    H, N, D, scale,
    R: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    g = tl.program_id(0)
    b = g // H
    h = g % H
    cols = tl.arange(0, BLOCK_N)
    dd = tl.arange(0, BLOCK_D)
    k = load_rows(K, b, h, skb, skh, skn, skd, cols, dd, N, D)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for start in range(0, N, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < N
        q = load_rows(Q, b, h, sqb, sqh, sqn, sqd, rows, dd, N, D)
        s = scores(q, k, scale, cols, N, IEEE)
        mx = tl.load(MX + g * N + rows, rmask, 0.0)
        inv_z = 1.0 / tl.load(Z + g * N + rows, rmask, 1.0)
        p = tl.exp(s - mx[:, None]) * inv_z[:, None]  # the forward's probabilities
        # c_r = G_r y_r scattered to its column (repeated ranks share one and add up)
        at = (g * N + rows) * R
        cmap = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for r in tl.static_range(R):
            pr = tl.load(POS + at + r, rmask, -1)
            gr = tl.load(GRAD + at + r, rmask, 0.0)
            cmap += tl.where(cols[None, :] == pr[:, None], gr[:, None] * p, 0.0)
        csum = tl.sum(cmap, 1)
        # own (1 - p) - p * others at a selected column, -p sum_r c_r elsewhere (own = 0)
        ds = cmap * (1.0 - p) - (csum[:, None] - cmap) * p
        if IEEE:
            dq = tl.dot(ds, k, input_precision="ieee") * scale
            dk += tl.dot(tl.trans(ds), q, input_precision="ieee")
        else:
            dq = tl.dot(ds, k, input_precision="tf32") * scale
            dk += tl.dot(tl.trans(ds), q, input_precision="tf32")
        dqp = DQ + (g * N + rows[:, None]) * D + dd[None, :]
        tl.store(dqp, dq, rmask[:, None] & (dd[None, :] < D))
    dkp = DK + (g * N + cols[:, None]) * D + dd[None, :]
    tl.store(dkp, dk * scale, (cols[:, None] < N) & (dd[None, :] < D))
