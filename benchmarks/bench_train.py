"""Training throughput of the tiny ViT on CPU (images/s), through lipsweep's own train step.

The foundation figure later issues compare against: tiny ViT (4 blocks, width 128, 4 heads,
32px / patch 4 = 65 tokens), batch 64, AdamW, crop+flip augmentation, fused attention as timm
ships it (F.scaled_dot_product_attention), fp32. Variants (fused vs unfused attention, thread
counts) are interleaved in one run and the median over repeats is reported.

    python benchmarks/bench_train.py [--steps 20] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from lipsweep.data.loading import load_splits, train_batches
from lipsweep.regularizers import create_regularizer_from_config
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.engine import build_optimizer, train_one_epoch
from lipsweep.vit.attention import set_fused_attention
from lipsweep.vit.models import create_model


def measure(cfg: TrialConfig, fused: bool, steps: int) -> float:
    torch.manual_seed(0)
    model = create_model(cfg.model)
    set_fused_attention(model, fused)
    reg = create_regularizer_from_config(cfg.regularizer)
    reg.attach(model)
    opt = build_optimizer(model, cfg.optim)
    splits = load_splits(cfg.data)
    batches = list(train_batches(splits, cfg.optim.batch_size, seed=0, epoch=1))[: steps + 2]
    kw = dict(
        optim_cfg=cfg.optim,
        data_cfg=cfg.data,
        device=torch.device("cpu"),
        precision="fp32",
        gen=torch.Generator().manual_seed(0),
        mixup=None,
        step0=0,
        steps_per_epoch=steps,
        epoch=1,
    )
    train_one_epoch(model, reg, opt, batches[:2], **kw)  # warm-up
    t0 = time.perf_counter()
    train_one_epoch(model, reg, opt, batches[2:], **kw)
    return steps * cfg.optim.batch_size / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = TrialConfig.from_yaml("configs/tiny.yaml")
    results: dict[str, list[float]] = {"fused (timm default)": [], "unfused": []}
    for _ in range(args.repeats):
        results["fused (timm default)"].append(measure(cfg, True, args.steps))
        results["unfused"].append(measure(cfg, False, args.steps))
    base = statistics.median(results["fused (timm default)"])
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} threads, batch {cfg.optim.batch_size}, {args.steps} steps x "
        f"{args.repeats} repeats (median)"
    )
    print("| variant | images/s | ratio to fused |\n|---|---:|---:|")
    for name, vals in results.items():
        med = statistics.median(vals)
        print(f"| {name} | {med:.0f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
