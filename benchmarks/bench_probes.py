"""Cost of the per-epoch robustness probes: measured on CPU and counted.

The tiny ViT of configs/tiny.yaml on the CIFAR-10 sample (default: the shared
cifar10_subset.npz, 4,660 train / 846 test images), fp32. On one model, each epoch: a whole
training epoch (lipsweep's ``train_one_epoch``, AdamW as the config), the per-epoch clean
evaluation on the 846 evaluation images, then one round of probes (``run_probes``: PGD at each
``pgd_eps`` on ``probe_images`` images, ||J_f|| median on ``probe_lip_images``). The ratio is
probe seconds / (train + clean-eval seconds) of the same epoch. Beside it, the same ratio from
counted passes (lipsweep/trial/probe_cost.py) at the epoch's share of correctly classified
probe images (PGD attacks only those), and the counted ratio at the paper recipe
(CIFAR-10/100, 50,000 images, batch 512, all images correct).

    python benchmarks/bench_probes.py [--epochs 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

from lipsweep.data.loading import load_splits, num_train_batches, to_unit, train_batches
from lipsweep.regularizers import create_regularizer_from_config
from lipsweep.search.space import load_space
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.engine import build_optimizer, evaluate_clean, train_one_epoch
from lipsweep.trial.probe_cost import probe_cost
from lipsweep.trial.probes import probe_set, run_probes
from lipsweep.vit.models import create_model

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "cifar10_subset.npz"
CPU = torch.device("cpu")


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln)
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SAMPLE))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = TrialConfig.from_yaml(
        ROOT / "configs" / "tiny.yaml",
        {"dataset": "npz", "data_dir": args.data, "eval_size": 0, "probe_every": 1},
    )
    splits = load_splits(cfg.data)
    bs = cfg.optim.batch_size
    torch.manual_seed(0)
    model = create_model(cfg.model)
    reg = create_regularizer_from_config(cfg.regularizer)
    reg.attach(model)
    opt = build_optimizer(model, cfg.optim)
    probes = probe_set(splits, cfg)
    kw = dict(
        optim_cfg=cfg.optim,
        data_cfg=cfg.data,
        device=CPU,
        precision="fp32",
        gen=torch.Generator().manual_seed(0),
        mixup=None,
        steps_per_epoch=num_train_batches(splits, bs),
        epoch=1,
    )
    n = cfg.probe.probe_images
    print(
        f"# {cpu_name()}, torch {torch.__version__}, {args.threads} thread(s); tiny ViT "
        f"(configs/tiny.yaml), {len(splits.x_train)} train / {len(splits.x_eval)} eval images, "
        f"batch {bs}; probes: {n} PGD images (pgd_eps {cfg.robustness.pgd_eps}, "
        f"{cfg.robustness.pgd_steps} steps), {cfg.probe.probe_lip_images} Jacobian images"
    )
    print(
        "| epoch | train s | clean eval s | epoch s | probe s | probe clean-correct "
        "| **measured** probe / epoch | counted probe / epoch |\n" + "|---:" * 8 + "|"
    )
    ratios = []
    for epoch in range(1, args.epochs + 1):
        batches = list(train_batches(splits, bs, seed=0, epoch=epoch))
        t0 = time.perf_counter()
        train_one_epoch(model, reg, opt, batches, step0=(epoch - 1) * len(batches), **kw)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        evaluate_clean(model, splits.x_eval, splits.y_eval, 256, CPU, precision="auto")
        eval_s = time.perf_counter() - t0
        with torch.no_grad():
            hits = model.eval()(to_unit(probes.x[:n])).argmax(1) == probes.y[:n]
        correct = float(hits.float().mean())
        t0 = time.perf_counter()
        run_probes(model, probes, cfg, CPU)
        probe_s = time.perf_counter() - t0
        counted = probe_cost(cfg, len(splits.x_train), len(splits.x_eval), correct_fraction=correct)
        epoch_s = train_s + eval_s
        ratios.append(probe_s / epoch_s)
        print(
            f"| {epoch} | {train_s:.1f} | {eval_s:.1f} | {epoch_s:.1f} | {probe_s:.1f} "
            f"| {correct:.3f} | **{probe_s / epoch_s:.3f}** | {counted.fraction:.3f} |"
        )
    print(f"\nmeasured probe / epoch, median over epochs: {statistics.median(ratios):.3f}\n")
    print(
        "| counted at the paper recipe (probe_every 1, 256 / 64 images, all correct) "
        "| probe / epoch |"
    )
    print("|---|---:|")
    for name in ("paper_cifar10", "paper_cifar100"):
        flat = dict(load_space(ROOT / "search_spaces" / f"{name}.yaml").trials[0])
        paper = TrialConfig.from_flat({**flat, "probe_every": 1})
        for k in (None, 3.2):
            c = probe_cost(paper, 50_000, 10_000, lanczos_iters=k)
            route = (
                f"Lanczos k={k if k is not None else paper.lipschitz.lip_iters}"
                if paper.model.num_classes > 32
                else "exact"
            )
            print(f"| {name} (‖J_f‖ {route}) | {c.fraction:.4f} |")
            if paper.model.num_classes <= 32:
                break


if __name__ == "__main__":
    main()
