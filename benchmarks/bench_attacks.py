"""Attack throughput and AutoAttack cost, measured side by side in one run.

1. PGD-4 (eps 4/255, no random start, same step) throughput in images/s: lipsweep's PGD vs
   torchattacks.PGD, interleaved in random order per repetition, medians reported, plus the
   ratio. ``--precision both`` adds lipsweep's PGD under bf16 autocast (meant for a GPU).
2. AutoAttack (eps 2/255, 10 iterations per attack, APGD-CE -> APGD-T -> FAB-T -> Square)
   wall time on ``--aa-images`` images and the share of each attack. On CPU the tiny ViT is
   first trained for ``--train-epochs`` on 1500 embedded CIFAR-10 training images; the
   evaluation images are the 500 embedded test images plus the 500 unused training images.
   Without training (``--train-epochs 0``, e.g. a random-init ViT-B on GPU, since no hub
   weights are reachable) the labels are the model's own predictions, so every image is
   attacked.

Examples::

    python benchmarks/bench_attacks.py --quick
    python benchmarks/bench_attacks.py --aa-images 1000
    python benchmarks/bench_attacks.py --device cuda --model vit_base_patch16_224 \\
        --precision both --batch 256 --train-epochs 0 --aa-images 1000
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lipsweep.attacks import PGD, AutoAttack  # noqa: E402
from lipsweep.attacks._registry import AutoAttackSettings, PgdSettings  # noqa: E402
from lipsweep.vit.models import ModelConfig, create_model  # noqa: E402

EMBEDDED = Path(__file__).resolve().parents[1] / "lipsweep" / "data" / "cifar10_sample.npz"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="vit_tiny_patch16_224")
    p.add_argument(
        "--tiny",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="depth 4 / width 128 / 4 heads (default: on for vit_tiny)",
    )
    p.add_argument("--precision", choices=["fp32", "bf16", "both"], default="fp32")
    p.add_argument("--batch", type=int, default=64, help="PGD batch size")
    p.add_argument("--reps", type=int, default=7, help="PGD repetitions per variant")
    p.add_argument("--aa-images", type=int, default=1000)
    p.add_argument("--aa-batch", type=int, default=256)
    p.add_argument("--train-epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--skip-pgd", action="store_true")
    p.add_argument("--skip-aa", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.batch, a.reps, a.aa_images, a.train_epochs = 32, 3, 64, 1
    return a


def build_model(a: argparse.Namespace) -> torch.nn.Module:
    tiny = a.tiny if a.tiny is not None else a.model.startswith("vit_tiny")
    extra = dict(depth=4, embed_dim=128, num_heads=4) if tiny else {}
    torch.manual_seed(0)
    return create_model(
        ModelConfig(model=a.model, img_size=32, patch_size=4, num_classes=10, **extra)
    ).to(a.device)


def load_data() -> dict[str, torch.Tensor]:
    d = np.load(EMBEDDED)
    return {
        k: (
            torch.from_numpy(d[k]).float().div(255)
            if k.startswith("x")
            else torch.from_numpy(d[k]).long()
        )
        for k in ("x_train", "y_train", "x_test", "y_test")
    }


def train(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, device: str
) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            idx = perm[i : i + 64]
            xb = x[idx]
            flip = torch.rand(len(idx), generator=g) < 0.5
            xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(-1), xb).to(device)
            loss = F.cross_entropy(model(xb), y[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    model.eval()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bench_pgd(model, x, y, a) -> None:
    import torchattacks

    eps, steps = 4 / 255, 4
    alpha = 2.5 * eps / steps
    pgd_settings = PgdSettings(pgd_steps=steps, pgd_step_size=alpha, pgd_random_start=False)
    variants = {
        "lipsweep PGD fp32": PGD(model, eps, pgd_settings),
        "torchattacks PGD fp32": torchattacks.PGD(
            model, eps=eps, alpha=alpha, steps=steps, random_start=False
        ),
    }
    if a.precision in ("bf16", "both"):
        variants["lipsweep PGD bf16"] = PGD(model, eps, pgd_settings, precision="bf16")
    if a.precision == "bf16":
        del variants["lipsweep PGD fp32"]
    times: dict[str, list[float]] = {k: [] for k in variants}
    for atk in variants.values():  # warm-up
        atk(x, y)
    order = list(variants)
    rng = random.Random(0)
    for _ in range(a.reps):
        rng.shuffle(order)
        for name in order:
            sync(a.device)
            t0 = time.perf_counter()
            variants[name](x, y)
            sync(a.device)
            times[name].append(time.perf_counter() - t0)
    ref = statistics.median(times["torchattacks PGD fp32"])
    print(f"\n### PGD-4 throughput ({a.model}, batch {len(x)}, {a.reps} interleaved reps)\n")
    print("| variant | median s/batch | images/s | vs torchattacks |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.3f} | {len(x) / med:.1f} | {ref / med:.2f}x |")


def bench_aa(model, x, y, a, precision: str) -> None:
    attack = AutoAttack(
        model, 2 / 255, AutoAttackSettings(aa_iters=10), batch_size=a.aa_batch, precision=precision
    )
    sync(a.device)
    t0 = time.perf_counter()
    res = attack.run(x, y)
    sync(a.device)
    total = time.perf_counter() - t0
    with torch.no_grad():
        clean = sum(
            int((model(x[i : i + a.aa_batch]).argmax(1) == y[i : i + a.aa_batch]).sum())
            for i in range(0, len(x), a.aa_batch)
        )
    print(f"\n### AutoAttack eps 2/255, 10 iterations ({a.model}, {len(x)} images, {precision})\n")
    print(
        f"clean accuracy {100 * clean / len(x):.1f}%, robust accuracy "
        f"{res.robust_accuracy:.1f}%, wall time {total:.1f} s "
        f"({total / len(x) * 1000:.0f} ms/image)\n"
    )
    print("| attack | images attacked | fooled | seconds | share of wall time |")
    print("|---|---|---|---|---|")
    for s in res.stages:
        print(
            f"| {s.attack} | {s.n_attacked} | {s.n_fooled} | {s.seconds:.1f} | "
            f"{100 * s.seconds / total:.1f}% |"
        )
    rest = total - sum(s.seconds for s in res.stages)
    print(
        f"| checks, clean and final forward passes | - | - | {rest:.1f} | "
        f"{100 * rest / total:.1f}% |"
    )
    for w in res.warnings:
        print(f"warning: {w}")


def main() -> None:
    a = parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch threads, device {a.device}"
        + (f" ({torch.cuda.get_device_name()})" if a.device.startswith("cuda") else "")
    )
    print(f"torch {torch.__version__}; args: {vars(a)}")
    data = load_data()
    model = build_model(a)
    if a.train_epochs:
        t0 = time.perf_counter()
        train(model, data["x_train"][:1500], data["y_train"][:1500], a.train_epochs, a.device)
        print(
            f"trained {a.train_epochs} epoch(s) on 1500 images in {time.perf_counter() - t0:.0f} s"
        )
    model.eval()
    x_eval = torch.cat([data["x_test"], data["x_train"][1500:]])
    y_eval = torch.cat([data["y_test"], data["y_train"][1500:]])
    if not a.train_epochs:
        with torch.no_grad():
            y_eval = torch.cat(
                [
                    model(x_eval[i : i + 256].to(a.device)).argmax(1).cpu()
                    for i in range(0, len(x_eval), 256)
                ]
            )
    if not a.skip_pgd:
        reps = -(-a.batch // len(x_eval))
        xb = x_eval.repeat(reps, 1, 1, 1)[: a.batch].to(a.device)
        yb = y_eval.repeat(reps)[: a.batch].to(a.device)
        bench_pgd(model, xb, yb, a)
    if not a.skip_aa:
        n = a.aa_images
        reps = -(-n // len(x_eval))
        xa = x_eval.repeat(reps, 1, 1, 1)[:n].to(a.device)
        ya = y_eval.repeat(reps)[:n].to(a.device)
        for precision in ["fp32", "bf16"] if a.precision == "both" else [a.precision]:
            bench_aa(model, xa, ya, a, precision)


if __name__ == "__main__":
    main()
