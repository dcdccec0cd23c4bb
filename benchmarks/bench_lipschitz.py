"""Cost and accuracy of the Lipschitz estimates, side by side (interleaved) in one run.

Part 1, the per-sample norm ||J_f(x)||_2 on a batch of 64 tiny-ViT images (32 px, patch 4,
65 tokens, depth 4, width 128, 4 heads) as a multiple of one forward+backward (cross-entropy,
parameter gradients, fused attention: a training step without the optimizer) on the same batch:
the default route, the other routes, the per-step Lanczos the batched route replaced
(benchmarks/lipschitz_reference.py) and the per-sample reference
``torch.autograd.functional.jacobian`` + SVD; at C = 10 and C = 100 logits. Each repetition
runs every variant once in a rotating order; a variant's ratio is the median over repetitions
of (its time / the baseline's time in the same repetition). Wall time and process CPU time
(``time.process_time``; the steadier measure on a shared machine with ``--threads 1``) are both
reported. Accuracy: max relative error of each iterative route against the exact one.

Part 2, the whole trial-level summary (``lipschitz_summary`` with the default
``LipschitzConfig``) on N evaluation images against PGD-4 (eps 4/255, ``lipsweep.attacks.pgd``
plus one clean forward per batch, batches of 256 as the attack suite runs it) on the same
images, interleaved; then each part of the summary alone, and the secular vs dense-eigvalsh
softmax norms.

The model is trained briefly (``--train-steps``, AdamW) on the embedded CIFAR-10 sample so the
attention maps and iteration counts are those of a model that has learned something.

Usage::

    python benchmarks/bench_lipschitz.py --quick                 # 10-15 minutes, 2 cores
    python benchmarks/bench_lipschitz.py --threads 1 --images 1000
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from lipschitz_reference import reference_lanczos_norms  # benchmarks/, beside this file

from lipsweep.attacks import pgd
from lipsweep.lipschitz import (
    LipschitzConfig,
    create_estimator,
    jacobian_norm_result,
    lipschitz_summary,
    softmax_jacobian_norm,
)
from lipsweep.vit.attention import QKRecorder, attention_probs
from lipsweep.vit.models import ModelConfig, create_model

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = "lanczos, per-step reference"
SAMPLE = ROOT / "lipsweep" / "data" / "cifar10_sample.npz"


def tiny_config(num_classes: int) -> ModelConfig:
    return ModelConfig(
        model="vit_tiny_patch16_224",
        img_size=32,
        patch_size=4,
        num_classes=num_classes,
        depth=4,
        embed_dim=128,
        num_heads=4,
    )


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train x, train y, eval x, eval y): train on x_train[:1000], evaluate on the rest."""
    d = np.load(SAMPLE)
    xtr = torch.from_numpy(d["x_train"]).float().div(255)
    ytr = torch.from_numpy(d["y_train"]).long()
    xte = torch.from_numpy(d["x_test"]).float().div(255)
    yte = torch.from_numpy(d["y_test"]).long()
    return xtr[:1000], ytr[:1000], torch.cat([xte, xtr[1000:]]), torch.cat([yte, ytr[1000:]])


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(x), (64,), generator=g)
        y_b = y[idx] % model.net.num_classes
        loss = F.cross_entropy(model(x[idx]), y_b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def interleave(
    variants: dict[str, Callable[[], object]], base: str, reps: int
) -> dict[str, tuple[float, float, float]]:
    """name -> (median wall s, median wall ratio, median CPU ratio), rotating the order."""
    names = list(variants)
    for fn in variants.values():  # warm-up
        fn()
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(reps):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            times[n].append(timed(variants[n]))
    out = {}
    for n in names:
        wr = [t[0] / b[0] for t, b in zip(times[n], times[base])]
        cr = [t[1] / b[1] for t, b in zip(times[n], times[base])]
        out[n] = (
            statistics.median(t[0] for t in times[n]),
            statistics.median(wr),
            statistics.median(cr),
        )
    return out


def fwd_bwd(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    return run


def per_sample_reference(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The naive way: one autograd.functional.jacobian + SVD per image."""
    out = []
    for xi in x:
        jac = torch.autograd.functional.jacobian(lambda z: model(z.unsqueeze(0))[0], xi)
        out.append(torch.linalg.matrix_norm(jac.reshape(jac.shape[0], -1), 2))
    return torch.stack(out)


def part1(args: argparse.Namespace, data) -> None:
    xtr, ytr, xev, _ = data
    x = xev[:64]
    print("\n## Part 1: per-sample ||J_f(x)||_2, batch of 64, ratio to one forward+backward\n")
    print("| C | variant | route | wall s | x fwd+bwd (wall) | x fwd+bwd (CPU) |")
    print("|---|---|---|---|---|---|")
    accuracy = []
    for classes in (10, 100):
        torch.manual_seed(0)
        model = create_model(tiny_config(classes))
        train(model, xtr, ytr, args.train_steps)
        y = torch.randint(0, classes, (64,), generator=torch.Generator().manual_seed(0))
        routes = {"default (auto)": "auto", "exact": "exact", "lanczos": "lanczos"}
        if classes == 10 or not args.quick:
            routes["power"] = "power"
        variants: dict[str, Callable[[], object]] = {"fwd+bwd": fwd_bwd(model, x, y)}
        for label, route in routes.items():
            variants[label] = lambda r=route: jacobian_norm_result(model, x, 100, route=r)
        variants[REFERENCE] = lambda: reference_lanczos_norms(model, x)
        if classes == 10:
            variants["per-sample jacobian+SVD"] = lambda: per_sample_reference(model, x)
        res = interleave(variants, "fwd+bwd", args.reps)
        for label, (wall, wr, cr) in res.items():
            route = (
                "-"
                if label in ("fwd+bwd", "per-sample jacobian+SVD", REFERENCE)
                else jacobian_norm_result(model, x[:1], 100, route=routes[label]).route
            )
            print(
                f"| {classes} | {label} | {route} | {wall:.3f} | {wr:.2f} | {cr:.2f} |", flush=True
            )
        print(
            f"|  | **lanczos vs {REFERENCE}** |  |  | "
            f"**{res[REFERENCE][1] / res['lanczos'][1]:.2f}x faster** (wall) |"
            f" **{res[REFERENCE][2] / res['lanczos'][2]:.2f}x** (CPU) |"
        )
        exact = jacobian_norm_result(model, x, 100, route="exact")
        ref_values, ref_iters = reference_lanczos_norms(model, x)
        accuracy.append(
            (
                classes,
                REFERENCE,
                ((ref_values - exact.values).abs() / exact.values).max().item(),
                ref_iters.float().mean().item(),
                1.0,
            )
        )
        for route in [r for r in ("lanczos", "power") if r in routes.values()]:
            it = jacobian_norm_result(model, x, 100, route=route)
            rel = ((it.values - exact.values).abs() / exact.values).max().item()
            accuracy.append(
                (
                    classes,
                    route,
                    rel,
                    it.iterations.float().mean().item(),
                    it.converged.float().mean().item(),
                )
            )
        if classes == 10:
            ref = per_sample_reference(model, x[:8])
            rel = ((exact.values[:8] - ref).abs() / ref).max().item()
            accuracy.append((classes, "exact vs per-sample SVD (8 images)", rel, 10.0, 1.0))
            speedup = res["per-sample jacobian+SVD"][1] / res["default (auto)"][1]
            print(
                f"|  | **default vs per-sample jacobian+SVD** |  |  | "
                f"**{speedup:.1f}x faster** |  |"
            )
    print("\n| C | route | max rel. error vs exact | mean iterations | converged |")
    print("|---|---|---|---|---|")
    for classes, route, rel, iters, conv in accuracy:
        print(f"| {classes} | {route} | {rel:.2e} | {iters:.1f} | {conv:.2f} |")


def pgd4_eval(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    for i in range(0, len(x), 256):
        xb, yb = x[i : i + 256], y[i : i + 256]
        with torch.no_grad():
            model(xb)  # the clean forward
        adv = pgd(model, xb, yb, eps=4 / 255, steps=4)
        with torch.no_grad():
            model(adv)


def part2(args: argparse.Namespace, data) -> None:
    xtr, ytr, xev, yev = data
    n = args.images
    x, y = xev[:n], yev[:n]
    torch.manual_seed(0)
    model = create_model(tiny_config(10))
    train(model, xtr, ytr, args.train_steps)
    cfg = LipschitzConfig()  # the defaults
    n_jac = cfg.lip_images or len(x)
    n_soft = min(cfg.lip_softmax_images or n_jac, n_jac)
    n_head = min(cfg.lip_head_images or n_jac, n_jac)
    print(f"\n## Part 2: whole summary (default LipschitzConfig) vs PGD-4 on {len(x)} images\n")
    print(
        f"Defaults: ||J|| ({cfg.lip_route}) on the first {n_jac} images, softmax ratio on "
        f"{n_soft}, exact head norms + Thm 1-3 on {n_head}; batches of {cfg.lip_batch_size}."
        f" PGD-4: eps 4/255, 4 steps, random start, batches of 256, + clean forward.\n"
    )
    res = interleave(
        {
            "PGD-4 (eps 4/255) + clean": lambda: pgd4_eval(model, x, y),
            "lipschitz_summary": lambda: lipschitz_summary(model, x, cfg),
        },
        "PGD-4 (eps 4/255) + clean",
        args.summary_reps,
    )
    print("| variant | wall s | x PGD-4 (wall) | x PGD-4 (CPU) |")
    print("|---|---|---|---|")
    for label, (wall, wr, cr) in res.items():
        print(f"| {label} | {wall:.1f} | {wr:.2f} | {cr:.2f} |", flush=True)
    parts = {
        f"||J|| exact, {n_jac} images": (create_estimator("jacobian_exact"), x[:n_jac]),
        f"softmax ratio, {n_soft} images": (create_estimator("softmax_jacobian"), x[:n_soft]),
        f"head exact + bounds, {n_head} images": (
            create_estimator("head_bounds", cfg),
            x[:n_head],
        ),
        f"||J|| exact, all {len(x)} images": (create_estimator("jacobian_exact"), x),
    }
    print("\n| summary part (alone, once) | wall s | CPU s |")
    print("|---|---|---|")
    pgd_wall, pgd_cpu = timed(lambda: pgd4_eval(model, x, y))
    print(f"| (PGD-4 + clean, {len(x)} images, for scale) | {pgd_wall:.1f} | {pgd_cpu:.1f} |")
    for label, (est, xs) in parts.items():
        wall, cpu = timed(lambda: [est(model, xs[i : i + 64]) for i in range(0, len(xs), 64)])
        print(f"| {label} | {wall:.1f} | {cpu:.1f} |", flush=True)
    with QKRecorder(model) as rec, torch.no_grad():
        model(x[:8])
    probs = torch.stack(
        [attention_probs(q.double(), k.double(), s) for q, k, s in rec.records], 1
    )  # (8, L, H, N, N)
    res = interleave(
        {
            "eigvalsh": lambda: softmax_jacobian_norm(probs, "eigvalsh"),
            "secular": lambda: softmax_jacobian_norm(probs, "secular"),
        },
        "eigvalsh",
        3,
    )
    err = (
        (
            (
                softmax_jacobian_norm(probs, "secular") - softmax_jacobian_norm(probs, "eigvalsh")
            ).abs()
            / softmax_jacobian_norm(probs, "eigvalsh")
        )
        .max()
        .item()
    )
    print(
        f"\nSoftmax ||M(P_i)|| of 8 images x {probs.shape[1] * probs.shape[2] * probs.shape[3]}"
        f" rows: secular {res['secular'][1]:.3f}x the time of eigvalsh "
        f"({1 / res['secular'][1]:.0f}x faster); max rel. difference {err:.1e}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and images")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("LIPSWEEP_THREADS", 2)))
    ap.add_argument("--images", type=int, default=None, help="part 2 images (default 1000)")
    ap.add_argument("--reps", type=int, default=None, help="part 1 repetitions")
    ap.add_argument("--summary-reps", type=int, default=None, help="part 2 repetitions")
    ap.add_argument("--train-steps", type=int, default=None)
    ap.add_argument("--part", choices=("1", "2", "all"), default="all")
    args = ap.parse_args()
    args.images = args.images or (500 if args.quick else 1000)
    args.reps = args.reps or (3 if args.quick else 7)
    args.summary_reps = args.summary_reps or (1 if args.quick else 3)
    args.train_steps = (
        args.train_steps if args.train_steps is not None else (30 if args.quick else 150)
    )
    torch.set_num_threads(args.threads)
    print(
        f"# bench_lipschitz: torch {torch.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs visible, {args.threads} threads, load average "
        f"{os.getloadavg()[0]:.1f}, train steps {args.train_steps}"
    )
    data = load_data()
    if args.part in ("1", "all"):
        part1(args, data)
    if args.part in ("2", "all"):
        part2(args, data)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
