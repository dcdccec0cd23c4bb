"""The cost of one ViT-B checkpoint: its size, save and load time.

The checkpoint a paper trial writes: ViT-B (patch 4, 32 px, 100 classes, lipsweep's
``create_model``) with its SGD momentum buffers, after one training step, through
``trial.checkpoint.save_checkpoint`` (safetensors, SHA-256, fsync, atomic rename) and
``load_latest`` (read, verify). Tensors are on the CPU, so no device-to-host copy is timed; the
upload to Tune's storage is not part of it. The cadence the paper spaces use
(``checkpoint_every: 10``) is chosen from these figures (docs/benchmarks.md).

    python benchmarks/bench_checkpoint.py [--saves 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_suite as gs  # noqa: E402

from lipsweep.regularizers import create_regularizer  # noqa: E402
from lipsweep.settings.config import OptimConfig  # noqa: E402
from lipsweep.trial.checkpoint import load_latest, save_checkpoint  # noqa: E402
from lipsweep.trial.engine import build_optimizer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--saves", type=int, default=3, help="checkpoints to write (median reported)")
    p.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dev = torch.device("cpu")
    model = gs.build_vit(gs.FULL, 100, dev)
    opt = build_optimizer(model, OptimConfig(lr=0.01))
    batch = gs.random_batches(1, 2, 100, dev)
    gs.train_steps(model, create_regularizer("none"), opt, batch, "fp32", dev, 100)  # momentum
    root = Path(tempfile.mkdtemp(prefix="bench_checkpoint_", dir=args.dir))
    try:
        secs = []
        for epoch in range(1, args.saves + 1):
            t0 = time.perf_counter()
            path = save_checkpoint(
                root, epoch, model.net.state_dict(), opt.state_dict(), {}, {"history": []}, keep=2
            )
            secs.append(time.perf_counter() - t0)
        size = sum(f.stat().st_size for f in path.iterdir())
        t0 = time.perf_counter()
        load_latest(root)
        load_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = statistics.median(secs)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"ViT-B checkpoint (weights + SGD momentum): {size / 1e6:.0f} MB")
    print(f"save: {', '.join(f'{s:.2f}' for s in secs)} s (median {med:.2f} s)")
    print(f"load + verify: {load_s:.2f} s; load average {load:.1f}, {os.cpu_count()} CPUs")
    for every in (1, 5, 10, 20):
        n = len(gs.checkpoint_epochs(40, every))
        print(f"checkpoint_every {every:2d}: {n:2d} saves per 40-epoch trial = {n * med:6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
