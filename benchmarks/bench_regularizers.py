"""Train-step cost of the attention regularizers, side by side (interleaved) in one run.

Measures forward + backward + SGD step of the tiny ViT (32 px, patch 4 -> 65 tokens, depth 4,
width 128, 4 heads, batch 64) on CPU for: the baseline (fused attention, no hooks), JaSMin
k=10 mean, JaSMin k=0 max and Specformer (1e-2, 1e-2, 1e-2). Each repetition runs one step of
every variant in a rotating order; the ratio of a variant is the median over repetitions of
(its step time / the baseline's step time in the same repetition). Both wall time and the
process's CPU time (``time.process_time``) are reported, and the ratio of the fastest CPU
times: on a shared machine the CPU time of a single-threaded run, and its minimum over the
repetitions, are the steadier measures of the work done.

Then each regularizer term alone (its forward + backward on one recorded step's q/k or on
the weights, repeated) as a share of the baseline step: a low-noise view of the same cost.

Memory: the bytes of tensors autograd saves for backward during one forward (+ regularizer
terms), counted through ``torch.autograd.graph.saved_tensors_hooks`` (unique storages,
parameters excluded): the activation memory held from forward to backward, which is what
materialising attention maps would inflate.

Usage::

    python benchmarks/bench_regularizers.py --quick --threads 1     # < 2 minutes
    python benchmarks/bench_regularizers.py --alternatives          # also rejected designs
    python benchmarks/bench_regularizers.py --model vitb            # ViT-B width, depth 2
    python benchmarks/bench_regularizers.py --profile               # torch.profiler table
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from lipsweep.regularizers import _ranked_softmax, create_regularizer, jasmin_penalty
from lipsweep.regularizers.jasmin import jasmin_penalty_from_qk
from lipsweep.vit.attention import QKRecorder, attention_probs
from lipsweep.vit.models import ModelConfig, create_model

Extra = Callable[[], Optional[torch.Tensor]]
MAIN = {  # name -> registry settings
    "baseline (fused, no hooks)": ("none", {}),
    "jasmin k=10 mean": ("jasmin", dict(k=10, lam=1e-2, aggregation="mean")),
    "jasmin k=0 max": ("jasmin", dict(k=0, lam=1e-2, aggregation="max")),
    "specformer (1e-2,1e-2,1e-2)": ("specformer", dict(lam_q=1e-2, lam_k=1e-2, lam_v=1e-2)),
}


def model_config(kind: str) -> ModelConfig:
    """'tiny': the test suite's ViT (width 128, 4 heads, depth 4). 'vitb': ViT-B's width
    (768, 12 heads of 64, 65 tokens) at depth 2, to see the overhead at the paper's shapes."""
    if kind == "vitb":
        return ModelConfig(
            model="vit_base_patch16_224", img_size=32, patch_size=4, num_classes=100, depth=2
        )
    return ModelConfig(
        model="vit_tiny_patch16_224",
        img_size=32,
        patch_size=4,
        num_classes=10,
        depth=4,
        embed_dim=128,
        num_heads=4,
    )


def _registry_variant(name: str, kw: dict) -> Callable:
    def make(model):
        reg = create_regularizer(name, **kw)
        reg.attach(model)

        def extra():
            terms = reg.terms()
            return sum(reg.weights[n] * t for n, t in terms.items()) if terms else None

        return extra

    return make


def _recorded_variant(penalty: Callable) -> Callable:
    """Alternatives: a JaSMin penalty computed from the recorded (q, k, scale) list."""

    def make(model):
        rec = QKRecorder(model, active=lambda: model.training and torch.is_grad_enabled())

        def extra():
            records, rec.records = rec.records, []
            return 1e-2 * penalty(records)

        return extra

    return make


def _autograd_p(records):  # plain autograd: keeps every (B, H, N, N) map for backward
    return jasmin_penalty([attention_probs(q, k, s) for q, k, s in records], 10, "mean")


def _checkpointed(records):  # recompute P in backward via torch.utils.checkpoint
    def one(q, k, s):
        return jasmin_penalty(attention_probs(q, k, s), 10, "mean")

    return sum(checkpoint(one, q, k, s, use_reentrant=False) for q, k, s in records)


def _stacked(records):  # one Function call over all layers (copies q and k)
    q = torch.stack([r[0] for r in records]).flatten(0, 1)
    k = torch.stack([r[1] for r in records]).flatten(0, 1)
    return jasmin_penalty_from_qk([(q, k, records[0][2])], 10, "mean") * len(records)


def _topk_selection(records):  # torch.topk instead of the int-key selection
    _ranked_softmax._CPU_INT_KEYS = False
    try:
        return jasmin_penalty_from_qk(records, 10, "mean")
    finally:
        _ranked_softmax._CPU_INT_KEYS = True


def variants(alternatives: bool) -> dict[str, Callable]:
    out = {name: _registry_variant(reg, kw) for name, (reg, kw) in MAIN.items()}
    if alternatives:
        out.update(
            {
                "alt: k=10 mean, autograd through P": _recorded_variant(_autograd_p),
                "alt: k=10 mean, checkpointed P": _recorded_variant(_checkpointed),
                "alt: k=10 mean, one call, stacked layers": _recorded_variant(_stacked),
                "alt: k=10 mean, torch.topk selection": _recorded_variant(_topk_selection),
            }
        )
    return out


def _step(model, opt, x, y, extra: Extra) -> tuple[float, float]:
    """One train step; returns (wall seconds, CPU seconds of this process)."""
    t0, c0 = time.perf_counter(), time.process_time()
    loss = F.cross_entropy(model(x), y)
    reg = extra()
    if reg is not None:
        loss = loss + reg
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - t0, time.process_time() - c0


def _saved_bytes(model, x, y, extra: Extra) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(x), y)
        reg = extra()
    (loss if reg is None else loss + reg).backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def _isolated_cpu_ms(cfg: ModelConfig, x, reps: int) -> dict[str, float]:
    """Median CPU ms of each regularizer term alone (forward + backward)."""
    torch.manual_seed(0)
    model = create_model(cfg).train()
    with QKRecorder(model) as rec:
        model(x)
    # the recorded views themselves (strided like the model's), as leaves
    leaves = [
        (q.detach().requires_grad_(), k.detach().requires_grad_(), s) for q, k, s in rec.records
    ]
    workspace = _ranked_softmax.Workspace()  # as JasminRegularizer keeps one
    out = {}
    for name, (reg_name, kw) in list(MAIN.items())[1:]:
        if reg_name == "jasmin":

            def run(kw=kw):
                jasmin_penalty_from_qk(
                    leaves, kw["k"], kw["aggregation"], workspace=workspace
                ).backward()
        else:
            reg = create_regularizer(reg_name, **kw)
            reg.attach(model)

            def run(reg=reg):
                sum(reg.weights[n] * t for n, t in reg.terms().items()).backward()

        out[name] = _median_cpu_ms(run, reps)
    out["floor, dense backward (4 bmm + 2 exp per layer)"] = _median_cpu_ms(
        lambda: _recompute_floor(leaves), reps
    )
    return out


def _recompute_floor(records) -> None:
    """The arithmetic no exact low-memory design avoids: S and exp(S) in forward; S, exp(S)
    and the two products dS k, dS^T q in backward."""
    for q, k, _ in records:
        q3 = q.detach().reshape(-1, *q.shape[-2:])
        k3 = k.detach().reshape(-1, *k.shape[-2:])
        for _ in range(2):
            s = torch.bmm(q3, k3.transpose(1, 2)).exp_()
        torch.bmm(s, k3)
        torch.bmm(s.transpose(1, 2), q3)


def _median_cpu_ms(run: Callable[[], None], reps: int) -> float:
    times = []
    for _ in range(reps + 1):
        c0 = time.process_time()
        run()
        times.append(time.process_time() - c0)
    return statistics.median(times[1:]) * 1e3


def _vit_b_analysis(batch: int = 512) -> str:
    layers, heads, n, dim = 12, 12, 65, 768
    maps = layers * batch * heads * n * n * 4
    rows = layers * batch * heads * n
    kept = rows * (2 * 4 + 4 * 4)  # max and sum float32 + 4 int32 positions
    transient = batch * heads * n * n * 4  # one layer's S, during fwd/bwd
    qk = layers * 2 * batch * n * dim * 2  # q, k (bf16), already saved by SDPA
    return (
        f"ViT-B, batch {batch}, N={n}, 12 layers x 12 heads: the attention maps P in "
        f"float32 take {maps / 2**30:.2f} GiB, all kept until backward if materialised "
        f"(autograd through softmax and topk keeps more); this design keeps "
        f"{kept / 2**20:.0f} MiB (per row: max and sum + up to 4 int32 positions) plus one "
        f"layer's S at a time ({transient / 2**20:.0f} MiB, transient); the q and k it "
        f"reads ({qk / 2**30:.2f} GiB in bf16) are saved by the fused attention anyway."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (< 2 minutes)")
    ap.add_argument("--alternatives", action="store_true", help="also time rejected designs")
    ap.add_argument("--profile", action="store_true", help="print a torch.profiler table")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument(
        "--model",
        choices=["tiny", "vitb"],
        default="tiny",
        help="tiny ViT (default) or ViT-B width at depth 2",
    )
    ap.add_argument("--batch", type=int, default=None, help="default 64 (tiny), 16 (vitb)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0]
    reps = args.reps or (5 if args.quick else 15)
    batch = args.batch or (16 if args.model == "vitb" else 64)
    cfg = model_config(args.model)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch, 3, 32, 32, generator=g)
    y = torch.randint(0, cfg.num_classes, (batch,), generator=g)

    runs = {}
    for name, make in variants(args.alternatives).items():
        torch.manual_seed(0)
        model = create_model(cfg).train()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        runs[name] = (model, opt, make(model))
    names = list(runs)
    for name in names:  # warm-up
        model, opt, extra = runs[name]
        for _ in range(2):
            _step(model, opt, x, y, extra)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            model, opt, extra = runs[name]
            w, c = _step(model, opt, x, y, extra)
            wall[name].append(w)
            cpu[name].append(c)
    base = names[0]
    print(
        f"# {platform.machine()} CPU ({os.cpu_count()} cores, shared), "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, model "
        f"{args.model} ({cfg.num_tokens} tokens), batch {batch}, {reps} interleaved "
        f"repetitions, load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end"
    )
    print(
        "| variant | wall ms | wall ratio | CPU ms | CPU ratio | CPU ratio of minima "
        "| saved for backward (MiB) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        model, opt, extra = runs[name]
        mem = _saved_bytes(model, x, y, extra) / 2**20
        row = [name]
        for t in (wall, cpu):
            ratio = statistics.median(a / b for a, b in zip(t[name], t[base]))
            row += [f"{statistics.median(t[name]) * 1e3:.0f}", f"{ratio:.3f}"]
        row.append(f"{min(cpu[name]) / min(cpu[base]):.3f}")
        print("| " + " | ".join(row) + f" | {mem:.1f} |")
    base_ms = statistics.median(cpu[base]) * 1e3
    print()
    print("| term alone (forward + backward) | CPU ms | share of baseline step CPU |")
    print("|---|---|---|")
    for name, ms in _isolated_cpu_ms(cfg, x, 5 if args.quick else 10).items():
        print(f"| {name} | {ms:.1f} | {ms / base_ms:.1%} |")
    print()
    print(_vit_b_analysis())
    if args.profile:
        model, opt, extra = runs["jasmin k=10 mean"]
        with torch.profiler.profile() as prof:
            for _ in range(3):
                _step(model, opt, x, y, extra)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
