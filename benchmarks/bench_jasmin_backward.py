"""Cost and accuracy of the JaSMin fast path's backward, side by side in one run.

Two backwards of ``_RankedSoftmax`` on the same recorded q/k, interleaved:

- ``lse`` (a reference variant): saves the float32 log-sum-exp and rebuilds p = exp(s - lse);
- ``max+sum`` (lipsweep's): saves the row max m and sum Z and rebuilds p = exp(s - m) / Z with the
  forward's rounding, forming each selected entry as own (1 - p) - p * others.

Time: forward + backward of ``jasmin_penalty_from_qk`` over 4 layers at the tiny ViT's shapes
(batch 64, 4 heads, 65 tokens, head dim 32), process CPU time, median over repetitions, in a
rotating order; the ratio is taken per repetition. Accuracy: the relative error of the q/k
gradient against float64 autograd, on peaked rows (65 tokens, head dim 64,
top score 12 above the rest, all shifted by an offset), beside plain float32 autograd.

Usage::

    python benchmarks/bench_jasmin_backward.py --threads 1 --reps 30
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch.autograd.function import once_differentiable

from lipsweep.regularizers import jasmin as jasmin_mod
from lipsweep.regularizers import jasmin_penalty, jasmin_penalty_from_qk
from lipsweep.regularizers._ranked_softmax import (
    _compute_dtype,
    _operands,
    _RankedSoftmax,
    _scores,
    _take_ranks,
    _top_positions,
)
from lipsweep.vit.attention import attention_probs


class _LseRankedSoftmax(_RankedSoftmax):
    """The earlier backward: p = exp(s - lse), lse = m + log Z in float32."""

    @staticmethod
    def forward(ctx, q, k, scale, ranks, ws):
        dtype, (n, r) = _compute_dtype(q.dtype), (q.shape[-2], len(ranks))
        s = _scores(*_operands(q, k, scale, dtype, ws), ws)
        mx = s.amax(-1, keepdim=True)
        e = s.sub_(mx).exp_()
        z = e.sum(-1, keepdim=True)
        pos = _take_ranks(_top_positions(e, max(ranks) + 1, ws), ranks)
        probs = e.gather(-1, pos).div_(z)
        lse = mx.add_(z.log_())
        ctx.scale, ctx.ws = scale, ws
        ctx.save_for_backward(q, k, lse, pos.to(torch.int32))
        return probs.view(q.shape[:-2] + (n, r))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, lse, pos = ctx.saved_tensors
        dtype, (n, r) = _compute_dtype(q.dtype), (q.shape[-2], pos.shape[-1])
        grad, pos = grad.to(dtype).reshape(-1, n, r), pos.long()
        qs, kc = _operands(q, k, ctx.scale, dtype, ctx.ws)
        p = _scores(qs, kc, ctx.ws).sub_(lse).exp_()
        c = grad * p.gather(-1, pos)
        ds = p.mul_(-c.sum(-1, keepdim=True))
        ds.scatter_add_(-1, pos, c)
        dq = torch.bmm(ds, kc).mul_(ctx.scale)
        dk = torch.bmm(ds.transpose(1, 2), qs)
        return dq.view(q.shape), dk.view(k.shape), None, None, None


def _with_variant(variant: str):
    """ranked_softmax_probs bound to one backward (patched into jasmin's namespace)."""

    def ranked(q, k, scale, ranks, workspace=None):
        fn = _LseRankedSoftmax if variant == "lse" else _RankedSoftmax
        return fn.apply(q, k, float(scale), tuple(ranks), workspace or jasmin_mod.Workspace())

    return ranked


def _run(variant: str, records, k: int, aggregation: str) -> tuple:
    orig = jasmin_mod.ranked_softmax_probs
    jasmin_mod.ranked_softmax_probs = _with_variant(variant)
    try:
        val = jasmin_penalty_from_qk(records, k, aggregation)
        leaves = [t for q, kk, _ in records for t in (q, kk)]
        return torch.autograd.grad(val, leaves)
    finally:
        jasmin_mod.ranked_softmax_probs = orig


def _peaked(offset: float, n: int = 65, d: int = 64, b: int = 4, h: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    k[..., 0] = 1.0
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64) * 0.1
    tgt = torch.gather(
        k, 2, torch.randint(0, n, (b, h, n), generator=g)[..., None].expand(b, h, n, d)
    )
    scale = d**-0.5
    q = q + tgt * (12.0 / (d * scale))  # the target key ~12 above the others
    q[..., 0] = offset / scale  # every score of the row shifted by offset
    return q, k, scale


def _rel(got, want) -> float:
    a = torch.cat([g.double().flatten() for g in got])
    b = torch.cat([w.flatten() for w in want])
    return float((a - b).norm() / b.norm())


def accuracy_table() -> list[str]:
    rows = ["| score offset, k | lse (reference) | max+sum (lipsweep) | plain float32 autograd |"]
    rows.append("|---|---|---|---|")
    for offset, k in ((0.0, 0), (30.0, 0), (30.0, 2), (100.0, 0), (100.0, 10)):
        q64, k64, scale = _peaked(offset)
        leaves64 = [q64.requires_grad_(), k64.requires_grad_()]
        want = torch.autograd.grad(
            jasmin_penalty([attention_probs(q64, k64, scale)], k, "mean"), leaves64
        )
        q32 = q64.detach().float().requires_grad_()
        k32 = k64.detach().float().requires_grad_()
        plain = torch.autograd.grad(
            jasmin_penalty([attention_probs(q32, k32, scale)], k, "mean"), (q32, k32)
        )
        errs = [_rel(_run(v, [(q32, k32, scale)], k, "mean"), want) for v in ("lse", "max+sum")]
        rows.append(
            f"| {offset:g}, k={k} | {errs[0]:.2e} | {errs[1]:.2e} | {_rel(plain, want):.2e} |"
        )
    return rows


def timing(reps: int) -> dict[str, dict[str, float]]:
    g = torch.Generator().manual_seed(0)
    shape = (64, 4, 65, 32)  # tiny ViT: batch 64, 4 heads, 65 tokens, head dim 32
    records = [
        (
            torch.randn(shape, generator=g).requires_grad_(),
            torch.randn(shape, generator=g).requires_grad_(),
            32**-0.5,
        )
        for _ in range(4)
    ]
    out = {}
    for k, agg in ((10, "mean"), (0, "max")):
        times: dict[str, list[float]] = {"lse": [], "max+sum": []}
        order = list(times)
        for i in range(reps + 1):
            for v in order[i % 2 :] + order[: i % 2]:
                c0 = time.process_time()
                _run(v, records, k, agg)
                times[v].append(time.process_time() - c0)
        ratio = [a / b for a, b in zip(times["max+sum"][1:], times["lse"][1:])]
        out[f"k={k} {agg}"] = {
            "lse_ms": statistics.median(times["lse"][1:]) * 1e3,
            "max+sum_ms": statistics.median(times["max+sum"][1:]) * 1e3,
            "ratio_median": statistics.median(ratio),
            "ratio_q1": statistics.quantiles(ratio, n=4)[0],
            "ratio_q3": statistics.quantiles(ratio, n=4)[2],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} thread(s), {args.reps} repetitions"
    )
    print("\n".join(accuracy_table()))
    print()
    print("| term (4 layers, tiny ViT shapes) | lse (ms) | max+sum (ms) | ratio median [q1, q3] |")
    print("|---|---|---|---|")
    for name, t in timing(args.reps).items():
        print(
            f"| {name} | {t['lse_ms']:.1f} | {t['max+sum_ms']:.1f} | {t['ratio_median']:.3f} "
            f"[{t['ratio_q1']:.3f}, {t['ratio_q3']:.3f}] |"
        )


if __name__ == "__main__":
    main()
