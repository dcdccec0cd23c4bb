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
    kmask = (cols[:, None] < N) & (dd[None, :] < D)
    kp = K + b * skb + h * skh + cols[:, None] * skn + dd[None, :] * skd
    k = tl.load(kp, kmask, 0.0).to(tl.float32)
    for start in range(0, N, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < N
        qmask = rmask[:, None] & (dd[None, :] < D)
        qp = Q + b * sqb + h * sqh + rows[:, None] * sqn + dd[None, :] * sqd
        q = tl.load(qp, qmask, 0.0).to(tl.float32)
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
    kmask = (cols[:, None] < N) & (dd[None, :] < D)
    kp = K + b * skb + h * skh + cols[:, None] * skn + dd[None, :] * skd
    k = tl.load(kp, kmask, 0.0).to(tl.float32)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for start in range(0, N, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < N
        qmask = rmask[:, None] & (dd[None, :] < D)
        qp = Q + b * sqb + h * sqh + rows[:, None] * sqn + dd[None, :] * sqd
        q = tl.load(qp, qmask, 0.0).to(tl.float32)
        s = scores(q, k, scale, cols, N, IEEE)
        mx = tl.load(MX + g * N + rows, rmask, 0.0)
        inv_z = 1.0 / tl.load(Z + g * N + rows, rmask, 1.0)
        e = tl.exp(s - mx[:, None])
        at = (g * N + rows) * R
        csum = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for r in tl.static_range(R):
            pr = tl.load(POS + at + r, rmask, -1)
            yr = tl.sum(tl.where(cols[None, :] == pr[:, None], e, 0.0), 1) * inv_z
            csum += tl.load(GRAD + at + r, rmask, 0.0) * yr
        ds = e * (-(csum * inv_z))[:, None]
        for r in tl.static_range(R):
            pr = tl.load(POS + at + r, rmask, -1)
            yr = tl.sum(tl.where(cols[None, :] == pr[:, None], e, 0.0), 1) * inv_z
            own = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for r2 in tl.static_range(R):
                p2 = tl.load(POS + at + r2, rmask, -1)
                y2 = tl.sum(tl.where(cols[None, :] == p2[:, None], e, 0.0), 1) * inv_z
                c2 = tl.load(GRAD + at + r2, rmask, 0.0) * y2
                own += tl.where(p2 == pr, c2, 0.0)
            val = own * (1.0 - yr) - (csum - own) * yr
            ds = tl.where(cols[None, :] == pr[:, None], val[:, None], ds)
        if IEEE:
            dq = tl.dot(ds, k, input_precision="ieee") * scale
            dk += tl.dot(tl.trans(ds), q, input_precision="ieee")
        else:
            dq = tl.dot(ds, k) * scale
            dk += tl.dot(tl.trans(ds), q)
        dqp = DQ + (g * N + rows[:, None]) * D + dd[None, :]
        tl.store(dqp, dq, qmask)
    dkp = DK + (g * N + cols[:, None]) * D + dd[None, :]
    tl.store(dkp, dk * scale, kmask)
