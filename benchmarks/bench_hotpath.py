"""Cheap wins on the hot path: each fast path against a slower reference variant, side
by side (interleaved repetitions, medians of per-repetition ratios) in one run, on the tiny ViT
and at ViT-B width (768 = 12 heads x 64, 65 tokens, fewer blocks and a small batch).

- ``jasmin``: JaSMin term alone (forward + backward of ``jasmin_penalty_from_qk`` on one
  recorded step's q/k), CPU selection keeping only the ranks it reads vs a reference keeping
  all k + 1; loss and gradients must be bit-identical. Also the share of the term spent in the
  float32 q/k operand copies, with q/k recorded in float32 and under bf16 autocast.
- ``bounds``: ``head_bounds_at`` of one layer, norms through QR factors vs full SVDs (the
  reference: an SVD of every (D, D) A_h); maximum relative difference of the four bounds.
- ``lipschitz``: ``jacobian_norm_result`` (exact route and Lanczos) with the parameters frozen
  during the measurement vs not (the reference ``measurement_mode``); bytes saved for backward.

Usage::

    python benchmarks/bench_hotpath.py --reps 5            # all parts, tiny and vitb
    python benchmarks/bench_hotpath.py --parts bounds --models vitb
    python benchmarks/bench_hotpath.py --parts --models --compile inductor aot_eager

``--compile``: two train steps of a small ViT with JaSMin's hooks,
eager vs ``torch.compile`` with each backend named: compile time and the differences.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from typing import Callable, Iterator

import torch
from torch import nn

from lipsweep.lipschitz import head_bounds, jacobian
from lipsweep.regularizers import _ranked_softmax
from lipsweep.regularizers.jasmin import jasmin_penalty_from_qk
from lipsweep.vit.attention import QKRecorder, restore_fused_attention, set_fused_attention
from lipsweep.vit.models import ModelConfig, attention_modules, create_model
from lipsweep.vit.precision import bf16_autocast


def model_config(kind: str, depth: int) -> ModelConfig:
    if kind == "vitb":
        return ModelConfig(
            model="vit_base_patch16_224", img_size=32, patch_size=4, num_classes=10, depth=depth
        )
    return ModelConfig(
        model="vit_tiny_patch16_224",
        img_size=32,
        patch_size=4,
        num_classes=10,
        depth=depth,
        embed_dim=128,
        num_heads=4,
    )


def interleaved(variants: dict[str, Callable[[], None]], reps: int) -> dict[str, list[float]]:
    """CPU seconds of each variant per repetition, in a rotating order, after one warm-up."""
    names = list(variants)
    for n in names:
        variants[n]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            c0 = time.process_time()
            variants[n]()
            out[n].append(time.process_time() - c0)
    return out


def ratio(times: dict[str, list[float]], new: str, old: str) -> float:
    """Median over repetitions of new / old in the same repetition."""
    return statistics.median(a / b for a, b in zip(times[new], times[old]))


# --- the reference variants (the slower code each fast path is measured against) ------------


def _old_top_positions(e: torch.Tensor, ranks: tuple[int, ...], ws) -> torch.Tensor:
    n, m = e.shape[-1], max(ranks) + 1
    key = ws.take("key", e.shape, torch.float64, e.device).copy_(e).view(torch.int64)
    key.bitwise_or_(torch.arange(n))
    low = (1 << max(1, (n - 1).bit_length())) - 1
    flat = key.view(-1)
    offsets = torch.arange(0, key.numel(), n).view(key.shape[:-1] + (1,))
    out = []
    for _ in range(m):
        pos = key.amax(dim=-1, keepdim=True).bitwise_and_(low)
        flat.index_fill_(0, (pos + offsets).view(-1), -1)
        out.append(pos)
    return _ranked_softmax._take_ranks(torch.cat(out, -1), ranks)


def _old_head_bounds_at(x: torch.Tensor, w: head_bounds.HeadWeights) -> dict[str, torch.Tensor]:
    import math

    from lipsweep.lipschitz.softmax_jacobian import g1, softmax_jacobian_norm

    x = x.double()
    n = x.shape[1]
    spec = lambda m: torch.linalg.matrix_norm(m, 2)  # noqa: E731
    p = head_bounds.head_probs(x, w)
    xa, wq, wk, wv = head_bounds._augmented(x, w)
    nq, nk, nv = spec(wq), spec(wk), spec(wv)
    a_norm = spec(wq @ wk.transpose(1, 2) * w.scale)
    x_fro = torch.linalg.matrix_norm(xa, "fro")[:, None]
    x_spec = spec(xa)[:, None]
    r_tok = xa.norm(dim=-1).amax(-1)[:, None]
    p_spec = spec(p)
    m_max = softmax_jacobian_norm(p, "secular").amax(-1)
    g_max = g1(p).amax(-1)
    return {
        "thm1": n * (n + 1) * x_fro**2 * (nv * nq * nk + nv),
        "thm2": math.sqrt(3) * nv * (a_norm**2 * r_tok**4 * (4 * n + 1) + n).sqrt(),
        "thm3": nv * (p_spec + 2 * x_spec**2 * a_norm * m_max),
        "thm3_g1": nv * (p_spec + 2 * x_spec**2 * a_norm * g_max),
    }


@contextlib.contextmanager
def _old_measurement_mode(model: nn.Module, fused=None) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    flags = set_fused_attention(model, fused) if fused is not None else None
    model.eval()
    try:
        yield
    finally:
        for m, was in modes:
            m.training = was
        if flags is not None:
            restore_fused_attention(model, flags)


@contextlib.contextmanager
def patched(module, name: str, value) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


# --- parts ---------------------------------------------------------------------------------


def _recorded_leaves(model: nn.Module, x: torch.Tensor, bf16: bool):
    with QKRecorder(model) as rec, bf16_autocast("cpu") if bf16 else contextlib.nullcontext():
        model(x)
    return [
        (q.detach().requires_grad_(), k.detach().requires_grad_(), s) for q, k, s in rec.records
    ]


def part_jasmin(kind: str, model: nn.Module, x: torch.Tensor, reps: int) -> list[str]:
    rows = []
    leaves = _recorded_leaves(model, x, bf16=False)
    ws = _ranked_softmax.Workspace()
    for k, agg in ((10, "mean"), (0, "max")):

        def run(k=k, agg=agg) -> list[torch.Tensor]:
            loss = jasmin_penalty_from_qk(leaves, k, agg, workspace=ws)
            grads = torch.autograd.grad(loss, [t for q, kk, _ in leaves for t in (q, kk)])
            return [loss.detach(), *grads]

        def old(run=run):
            with patched(_ranked_softmax, "_top_positions", _old_top_positions):
                return run()

        same = all(torch.equal(a, b) for a, b in zip(run(), old()))
        t = interleaved({"new": run, "old": old}, reps)
        rows.append(
            f"| {kind} | JaSMin k={k} {agg}, term fwd+bwd | {statistics.median(t['old']) * 1e3:.1f}"
            f" | {statistics.median(t['new']) * 1e3:.1f} | {ratio(t, 'new', 'old'):.3f} "
            f"| loss and grads bit-identical: {same} |"
        )
    q0 = leaves[0][0]
    e = torch.rand(q0.shape[0] * q0.shape[1], q0.shape[2], q0.shape[2])  # one layer's E
    for ranks in ((0, 1, 9, 10), (0, 1)):
        new = _ranked_softmax._top_positions(e, ranks, ws)
        same = torch.equal(new, _old_top_positions(e, ranks, ws))
        t = interleaved(
            {
                "new": lambda r=ranks: _ranked_softmax._top_positions(e, r, ws),
                "old": lambda r=ranks: _old_top_positions(e, r, ws),
            },
            reps * 6,
        )
        rows.append(
            f"| {kind} | selection alone, ranks {ranks}, one layer {tuple(e.shape)} | "
            f"{statistics.median(t['old']) * 1e3:.2f} | {statistics.median(t['new']) * 1e3:.2f} "
            f"| {ratio(t, 'new', 'old'):.3f} | positions identical: {same} |"
        )
    for bf16 in (False, True):  # the q/k operand copies (forward and backward make them)
        lv = _recorded_leaves(model, x, bf16)

        def copies(lv=lv) -> None:
            for q, kk, s in lv:
                for _ in range(2):
                    _ranked_softmax._operands(q.detach(), kk.detach(), s, torch.float32, ws)

        def term(lv=lv) -> None:
            jasmin_penalty_from_qk(lv, 10, "mean", workspace=ws).backward()

        t = interleaved({"copies": copies, "term": term}, reps)
        rows.append(
            f"| {kind} | float32 q/k copies, q/k in {'bf16' if bf16 else 'fp32'} | "
            f"{statistics.median(t['term']) * 1e3:.1f} (term) | "
            f"{statistics.median(t['copies']) * 1e3:.1f} (copies) | "
            f"{ratio(t, 'copies', 'term'):.3f} of the term | - |"
        )
    return rows


def part_bounds(kind: str, model: nn.Module, x: torch.Tensor, reps: int) -> list[str]:
    with head_bounds.AttentionInputs(model) as rec, torch.no_grad():
        model.eval()(x)
    xl, w = rec.inputs[0], head_bounds.head_weights(rec.blocks[0])
    new = head_bounds.head_bounds_at(xl, w)
    old = _old_head_bounds_at(xl, w)
    diff = max(float(((new[k] - old[k]).abs() / old[k].abs()).max()) for k in new)
    t = interleaved(
        {
            "new": lambda: head_bounds.head_bounds_at(xl, w),
            "old": lambda: _old_head_bounds_at(xl, w),
        },
        reps,
    )
    return [
        f"| {kind} | head_bounds_at, 1 layer, {xl.shape[0]} images x {w.num_heads} heads | "
        f"{statistics.median(t['old']) * 1e3:.1f} | {statistics.median(t['new']) * 1e3:.1f} | "
        f"{ratio(t, 'new', 'old'):.4f} | max rel. diff of the bounds {diff:.1e} |"
    ]


def _saved_bytes(model: nn.Module, fn: Callable[[], None]) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            st = t.untyped_storage()
            ptr, size = st.data_ptr(), st.nbytes()
        except RuntimeError:  # a torch.func wrapper (saved during a JVP's forward)
            ptr, size = id(t), t.numel() * t.element_size()
        if ptr not in params:
            seen[ptr] = size
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def part_lipschitz(kind: str, model: nn.Module, x: torch.Tensor, reps: int) -> list[str]:
    rows = []
    for route, iters in (("exact", 10), ("lanczos", 10)):

        def new(route=route, iters=iters):
            return jacobian.jacobian_norm_result(model, x, iters, route=route, tol=1e-6).values

        def old(new=new):
            with patched(jacobian, "measurement_mode", _old_measurement_mode):
                return new()

        same = torch.equal(new(), old())
        mem_new, mem_old = _saved_bytes(model, new), _saved_bytes(model, old)
        t = interleaved({"new": new, "old": old}, reps)
        rows.append(
            f"| {kind} | ||J_f|| {route} (C=10), {x.shape[0]} images | "
            f"{statistics.median(t['old']) * 1e3:.0f} | {statistics.median(t['new']) * 1e3:.0f} | "
            f"{ratio(t, 'new', 'old'):.3f} | saved unique storages {mem_old / 2**20:.1f} -> "
            f"{mem_new / 2**20:.1f} MiB; values identical: {same} |"
        )
    return rows


def compile_check(backend: str) -> str:
    """Two train steps of a small ViT with JaSMin's hooks, eager vs torch.compile(backend)."""
    import torch.nn.functional as F

    from lipsweep.regularizers import create_regularizer

    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 3])
    out, secs = {}, {}
    for mode in ("eager", "compiled"):
        torch.manual_seed(0)
        cfg = ModelConfig(
            model="vit_tiny_patch16_224",
            img_size=16,
            patch_size=4,
            num_classes=10,
            depth=2,
            embed_dim=32,
            num_heads=2,
        )
        model = create_model(cfg).train()
        reg = create_regularizer("jasmin", k=3, lam=1e-2, aggregation="mean")
        reg.attach(model)
        run = torch.compile(model, backend=backend, fullgraph=True) if mode == "compiled" else model
        t0 = time.perf_counter()
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            ce = F.cross_entropy(run(x), y)
            pen = reg.terms()["jasmin"]
            (ce + reg.weights["jasmin"] * pen).backward()
        secs[mode] = time.perf_counter() - t0
        out[mode] = (pen.detach(), [p.grad for p in model.parameters()])
    (pe, ge), (pc, gc) = out["eager"], out["compiled"]
    rel = max(float((a - b).abs().max() / a.abs().max()) for a, b in zip(ge, gc))
    return (
        f"torch.compile(backend={backend!r}, fullgraph=True) with JaSMin hooks: 2 steps "
        f"{secs['compiled']:.1f} s (eager {secs['eager']:.2f} s); penalty |diff| "
        f"{float((pe - pc).abs()):.1e}; max relative gradient diff {rel:.1e}"
    )


PARTS = {"jasmin": part_jasmin, "bounds": part_bounds, "lipschitz": part_lipschitz}
SHAPES = {  # model -> (depth, batch of the JaSMin term, images of bounds, images of ||J||)
    "tiny": (4, 64, 8, 16),
    "vitb": (2, 16, 2, 4),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--parts", nargs="*", choices=list(PARTS), default=list(PARTS))
    ap.add_argument("--models", nargs="*", choices=list(SHAPES), default=list(SHAPES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--compile",
        nargs="*",
        default=[],
        metavar="BACKEND",
        help="also compile a small ViT with JaSMin hooks (e.g. inductor aot_eager)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0]
    print(
        f"# {platform.machine()} CPU ({os.cpu_count()} cores, shared), {args.threads} torch "
        f"thread(s), torch {torch.__version__}, {args.reps} interleaved repetitions, "
        f"load average {load0:.1f} at start"
    )
    print("| model | what | old CPU ms | new CPU ms | new / old (median) | check |")
    print("|---|---|---:|---:|---:|---|")
    for kind in args.models:
        depth, b_term, b_bounds, b_lip = SHAPES[kind]
        torch.manual_seed(0)
        model = create_model(model_config(kind, depth)).train()
        assert len(list(attention_modules(model))) == depth
        g = torch.Generator().manual_seed(0)
        x = torch.rand(b_term, 3, 32, 32, generator=g)
        for part in args.parts:
            n = {"jasmin": b_term, "bounds": b_bounds, "lipschitz": b_lip}[part]
            for row in PARTS[part](kind, model, x[:n], args.reps):
                print(row, flush=True)
            model.train()
    for backend in args.compile:
        print(compile_check(backend), flush=True)
    print(f"# load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
