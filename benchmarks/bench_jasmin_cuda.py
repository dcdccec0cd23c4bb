"""Where JaSMin's training-step time goes on a GPU, and which variant of its ranked softmax is
fastest.

The H100 suite (docs/benchmarks.md) measured a JaSMin step at 1.96x the baseline
step (ViT-B, bf16, batch 512; target 1.05). This script splits that cost and times the variants
of :mod:`lipsweep.regularizers._ranked_softmax` side by side, in one run:

- ``accuracy``: each variant's penalty and q/k gradients against a float64 reference, on bf16
  q and k with peaked and flat rows (relative errors; the float64 path is exact linear
  algebra up to rounding);
- ``parts``: one ViT-B attention layer at batch 512 (B=512, H=12, N=65, d=64): the operand
  copies, the score product in fp32 / TF32 / bf16-with-fp32-accumulation, the softmax
  passes, each ranking (topk, sort, int64 keys), and the whole forward+backward per variant;
- ``steps``: the ViT-B bf16 step (lipsweep's ``engine.train_one_epoch``) for the baseline and
  JaSMin k=10 mean under each variant, interleaved rounds, medians, ratio to the baseline;
- ``profile``: torch.profiler's top operators of JaSMin steps under the default variant.

    python benchmarks/bench_jasmin_cuda.py --out jasmin_cuda.json            # one GPU, ~2 min
    python benchmarks/bench_jasmin_cuda.py --quick --device cpu --out q.json  # the code path

Variants: ``fused`` (the Triton kernels of :mod:`._ranked_softmax_triton`, the default on CUDA)
and ``unfused_{topk,sort,keys}`` (the torch path with each way of ranking rows). A first run
(JSON kept as benchmarks/jasmin_cuda_h100_unfused.json) also timed bf16 operands
with float32 accumulation (``torch.bmm(..., out_dtype=float32)``) instead of float32 copies of
q and k: slower (0.57 vs 0.34 ms for S) and 3-7 % gradient error, so it was dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_suite as gs  # noqa: E402

from lipsweep.regularizers import _ranked_softmax as rs  # noqa: E402
from lipsweep.regularizers import create_regularizer  # noqa: E402
from lipsweep.regularizers.jasmin import jasmin_penalty_from_qk, jasmin_ranks  # noqa: E402
from lipsweep.settings.config import OptimConfig  # noqa: E402
from lipsweep.trial.engine import build_optimizer  # noqa: E402
from lipsweep.vit.precision import bf16_autocast  # noqa: E402

_log = logging.getLogger("bench_jasmin_cuda")

SELECTS = ("topk", "sort", "keys")


def variants(device: torch.device) -> list[str]:
    """'fused' (the Triton kernels, CUDA only) and the unfused path with each ranking."""
    fused = ["fused"] if device.type == "cuda" and rs._triton.available() else []
    return fused + [f"unfused_{sel}" for sel in SELECTS]


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    old = rs._FUSED, rs._SELECT
    rs._FUSED = name == "fused"
    rs._SELECT = name.removeprefix("unfused_") if name.startswith("unfused_") else "auto"
    try:
        yield
    finally:
        rs._FUSED, rs._SELECT = old


def timed(fn: Callable[[], Any], device: torch.device, reps: int, warm: int = 2) -> float:
    """Median milliseconds of ``fn`` over ``reps`` calls (CUDA events on a GPU)."""
    for _ in range(warm):
        fn()
    out = []
    for _ in range(reps):
        with gs.Clock(device) as clk:
            fn()
        out.append(clk.seconds * 1e3)
    return round(statistics.median(out), 4)


def qk(b: int, h: int, n: int, d: int, device: torch.device, seed: int) -> tuple:
    """bf16 q, k as a ViT hands them to attention: non-contiguous views of one qkv tensor,
    half the heads peaked (large-norm queries), half flat."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(b, n, 3, h, d, generator=g)
    qkv[:, :, 0, : h // 2] *= 4.0  # peaked rows in half of the heads
    qkv = qkv.to(device=device, dtype=torch.bfloat16).permute(2, 0, 3, 1, 4)
    return qkv[0], qkv[1]  # (B, H, N, d) each, strided


def section_accuracy(device: torch.device, out: dict) -> None:
    q0, k0 = qk(4, 12, 65, 64, device, seed=1)
    scale = 64**-0.5
    for k_reg in (0, 10):
        qd = q0.double().requires_grad_()
        kd = k0.double().requires_grad_()
        ref = jasmin_penalty_from_qk([(qd, kd, scale)], k_reg, "mean")
        ref.backward()
        for name in variants(device):
            q = q0.clone().requires_grad_()
            k = k0.clone().requires_grad_()
            try:
                with variant(name):
                    with bf16_autocast(device.type):
                        val = jasmin_penalty_from_qk([(q, k, scale)], k_reg, "mean")
                    val.backward()
            except Exception as exc:  # a failing variant is recorded, the others still run
                _log.exception("accuracy %s k=%d", name, k_reg)
                out.setdefault(f"k{k_reg}", {})[name] = {"error": f"{type(exc).__name__}: {exc}"}
                continue

            def rel(a: torch.Tensor, b: torch.Tensor) -> float:
                return float((a.double() - b).norm() / b.norm())

            out.setdefault(f"k{k_reg}", {})[name] = {
                "value_rel_err": abs(float(val.detach()) - float(ref)) / abs(float(ref)),
                "grad_q_rel_err": rel(q.grad, qd.grad),
                "grad_k_rel_err": rel(k.grad, kd.grad),
            }
    _log.info("accuracy: %s", json.dumps(out))


def section_parts(device: torch.device, quick: bool, out: dict) -> None:
    b = 16 if quick else 512
    h, n, d = (2, 65, 32) if quick else (12, 65, 64)
    reps = 3 if quick else 20
    q, k = qk(b, h, n, d, device, seed=2)
    scale = d**-0.5
    ws = rs.Workspace()
    qs, kc = rs._operands(q, k, scale, torch.float32, ws)
    out["shape"] = {"B": b, "H": h, "N": n, "d": d}
    out["operand_copies_ms"] = timed(
        lambda: rs._operands(q, k, scale, torch.float32, ws), device, reps
    )
    out["scores_fp32_ms"] = timed(lambda: rs._scores(qs, kc, ws), device, reps)
    from lipsweep.vit.precision import tf32_matmuls

    with tf32_matmuls(True):
        out["scores_tf32_ms"] = timed(lambda: rs._scores(qs, kc, ws), device, reps)
    s = rs._scores(qs, kc, ws).clone()

    def softmax_passes() -> None:
        e = s.clone()
        mx = e.amax(-1, keepdim=True)
        e.sub_(mx).exp_().sum(-1, keepdim=True)

    out["softmax_passes_ms"] = timed(softmax_passes, device, reps)
    e = (s - s.amax(-1, keepdim=True)).exp()
    for kr in (0, 10):
        ranks = jasmin_ranks(kr)
        for sel in SELECTS:
            with variant(f"unfused_{sel}"):
                out[f"rank_{sel}_k{kr}_ms"] = timed(
                    lambda r=ranks: rs._top_positions(e, r, ws), device, reps
                )
    for kr in (0, 10):
        ranks = jasmin_ranks(kr)
        for name in variants(device):
            qg = q.detach().clone().requires_grad_()
            kg = k.detach().clone().requires_grad_()

            def fwd_bwd(r: tuple = ranks) -> None:
                p = rs.ranked_softmax_probs(qg, kg, scale, r, ws)
                p.sum().backward()

            try:
                with variant(name):
                    out[f"layer_fwd_bwd_{name}_k{kr}_ms"] = timed(fwd_bwd, device, reps)
            except Exception as exc:  # a failing variant is recorded, the others still run
                _log.exception("layer %s k=%d", name, kr)
                out[f"layer_fwd_bwd_{name}_k{kr}_error"] = f"{type(exc).__name__}: {exc}"
    _log.info("parts: %s", json.dumps(out))


def section_tune(device: torch.device, quick: bool, out: dict) -> None:
    """Rows per block and warps of each fused kernel at ViT-B batch 512 (one layer): the
    forward alone, then forward + backward with the best forward; leaves the best of each
    set in ``_ranked_softmax_triton`` for the sections after it."""
    tri = rs._triton
    if device.type != "cuda" or not tri.available():
        out["skipped"] = "needs CUDA and Triton"
        return
    b, h, n, d = (16, 2, 65, 32) if quick else (512, 12, 65, 64)
    q, k = qk(b, h, n, d, device, seed=3)
    scale, ranks, reps = d**-0.5, jasmin_ranks(10), 20
    grid = [{"BLOCK_M": m, "num_warps": w} for m in (16, 32, 64) for w in (2, 4, 8)]
    old_f, old_b = dict(tri.FWD_CONFIG), dict(tri.BWD_CONFIG)
    fwd_ms: dict[str, float] = {}
    for cfg in grid:
        tri.FWD_CONFIG.clear()
        tri.FWD_CONFIG.update(cfg)
        try:
            fwd_ms[json.dumps(cfg)] = timed(
                lambda: rs.ranked_softmax_probs(q, k, scale, ranks), device, reps
            )
        except Exception as exc:
            fwd_ms[json.dumps(cfg)] = f"{type(exc).__name__}: {exc}"
    best_f = min((v, c) for c, v in fwd_ms.items() if isinstance(v, float))[1]
    tri.FWD_CONFIG.clear()
    tri.FWD_CONFIG.update(json.loads(best_f))
    qg = q.detach().clone().requires_grad_()
    kg = k.detach().clone().requires_grad_()

    def fwd_bwd() -> None:
        rs.ranked_softmax_probs(qg, kg, scale, ranks).sum().backward()

    both_ms: dict[str, float] = {}
    for cfg in grid:
        tri.BWD_CONFIG.clear()
        tri.BWD_CONFIG.update(cfg)
        try:
            both_ms[json.dumps(cfg)] = timed(fwd_bwd, device, reps)
        except Exception as exc:
            both_ms[json.dumps(cfg)] = f"{type(exc).__name__}: {exc}"
    best_b = min((v, c) for c, v in both_ms.items() if isinstance(v, float))[1]
    tri.BWD_CONFIG.clear()
    tri.BWD_CONFIG.update(json.loads(best_b))
    out.update(
        forward_ms=fwd_ms, forward_backward_ms=both_ms, best_forward=json.loads(best_f),
        best_backward=json.loads(best_b), defaults={"forward": old_f, "backward": old_b},
    )  # fmt: skip
    _log.info("tune: best forward %s %.4f ms, best backward %s, fwd+bwd %.4f ms",
              best_f, fwd_ms[best_f], best_b, both_ms[best_b])  # fmt: skip


def section_steps(device: torch.device, quick: bool, out: dict) -> None:
    sizes = gs.QUICK if quick else gs.FULL
    batch, steps, rounds = sizes.reg_batch, sizes.steps, sizes.rounds
    model = gs.build_vit(sizes, 100, device)
    batches = gs.random_batches(steps, batch, 100, device)
    plan = [("baseline", "none", None)] + [
        (f"jasmin_k{kr}_mean_{name}", "jasmin", (kr, name))
        for kr in (10, 0)
        for name in variants(device)
        if kr == 10 or name in ("fused", "unfused_keys", "unfused_topk")
    ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in plan}
    failed: dict[str, str] = {}
    for rnd in range(rounds):
        for name, reg_name, var in plan[rnd % len(plan) :] + plan[: rnd % len(plan)]:
            kw = {"k": var[0], "lam": 1e-2, "aggregation": "mean"} if var else {}
            reg = create_regularizer(reg_name, **kw)
            reg.attach(model)
            opt = build_optimizer(model, OptimConfig(lr=0.01))
            try:
                if name in failed:
                    continue
                with variant(var[1]) if var else contextlib.nullcontext():
                    t = gs.time_steps(
                        model,
                        reg,
                        opt,
                        batches,
                        sizes.warmup if rnd == 0 else 1,
                        "bf16",
                        device,
                        100,
                    )
                times[name].append(t * 1e3)
            except Exception as exc:  # a failing variant is recorded, the others still run
                _log.exception("step %s", name)
                failed[name] = f"{type(exc).__name__}: {exc}"
            finally:
                reg.detach()
        _log.info("steps: round %d/%d", rnd + 1, rounds)
    base = statistics.median(times["baseline"])
    out["batch"], out["precision"] = batch, "bf16"
    out["errors"] = failed
    for name, ts in times.items():
        if not ts:
            continue
        med = statistics.median(ts)
        out[name] = {
            "step_ms": round(med, 3),
            "rounds_ms": [round(t, 3) for t in ts],
            "ratio": round(med / base, 4),
        }
        _log.info("step %-32s %8.2f ms  ratio %.3f", name, med, med / base)


def section_profile(device: torch.device, quick: bool, out: dict, path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    sizes = gs.QUICK if quick else gs.FULL
    model = gs.build_vit(sizes, 100, device)
    batches = gs.random_batches(3, sizes.reg_batch, 100, device)
    reg = create_regularizer("jasmin", k=10, lam=1e-2, aggregation="mean")
    reg.attach(model)
    opt = build_optimizer(model, OptimConfig(lr=0.01))
    gs.train_steps(model, reg, opt, batches[:2], "bf16", device, 100)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        gs.train_steps(model, reg, opt, batches, "bf16", device, 100)
        gs._sync(device)
    reg.detach()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    try:
        table = prof.key_averages().table(sort_by=key, row_limit=30)
    except Exception:  # older torch: the CUDA column's old name
        key = "self_cuda_time_total"
        table = prof.key_averages().table(sort_by=key, row_limit=30)
    path.write_text(table)
    out["table_file"] = path.name
    out["sort_by"] = key
    _log.info("profile:\n%s", table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny shapes, same code path")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--sections", default="accuracy,parts,steps,profile")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    data: dict[str, Any] = {
        "meta": {
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "quick": args.quick,
        }
    }
    t0 = time.perf_counter()
    for name in args.sections.split(","):
        sec = data.setdefault(name, {})
        t = time.perf_counter()
        try:
            if name == "accuracy":
                section_accuracy(device, sec)
            elif name == "parts":
                section_parts(device, args.quick, sec)
            elif name == "tune":
                section_tune(device, args.quick, sec)
            elif name == "steps":
                section_steps(device, args.quick, sec)
            elif name == "profile":
                section_profile(device, args.quick, sec, args.out.with_suffix(".profile.txt"))
        except Exception as exc:  # one failure stays local; the JSON says which
            _log.exception("%s failed", name)
            sec["error"] = f"{type(exc).__name__}: {exc}"
        sec["seconds"] = round(time.perf_counter() - t, 2)
        args.out.write_text(json.dumps(data, indent=1))
    _log.info("done in %.0f s -> %s", time.perf_counter() - t0, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
