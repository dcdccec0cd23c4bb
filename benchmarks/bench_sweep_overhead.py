"""Per-trial overhead of a sweep: what Ray Tune + MLflow + checkpoint I/O add to a trial's own work.

Three commands, interleaved in each repetition (medians reported):

* ``own``: the 8 trials' own work. One Python process runs :func:`lipsweep.trial.run.run_trial` on
  each of the 8 trial configs in turn and reports the time spent inside those calls (model build,
  data load, one training step, its local checkpoint). Each trial is one step: 64 images at
  batch 64, 1 epoch, no evaluation, a 2-block width-64 ViT.
* ``sweep-1``: ``lipsweep sweep`` of a 1-trial space, whole command from launch to exit.
* ``sweep-8``: ``lipsweep sweep`` of the 8-trial space, whole command, one trial at a time
  (``--max-concurrent-trials 1``), each with a fresh SQLite MLflow store and Tune storage.

Reported:

* all-in overhead per trial = (wall(sweep-8) - own) / 8: every second the sweep command spends
  beyond the trials' own work (Python and Ray start-up, scheduling, worker start-up, Tune
  checkpoints, MLflow runs, params, metrics and artifacts), spread over 8 trials;
* marginal overhead per trial = (wall(sweep-8) - wall(sweep-1) - 7/8 own) / 7: the cost of one
  more trial once the sweep is running (the fixed start-up cost cancels).

Target: <= 2 s per trial on the 2-core development machine.

    python benchmarks/bench_sweep_overhead.py            # 3 repetitions (~6 min on 2 cores)
    python benchmarks/bench_sweep_overhead.py --reps 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N_TRIALS = 8

FIXED = {
    "model": "vit_tiny_patch16_224",
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "dataset": "embedded",
    "train_size": 64,
    "eval_size": 32,
    "epochs": 1,
    "batch_size": 64,
    "optimizer": "adamw",
    "lr": 1e-3,
    "evaluate": False,
}
GRID = [
    {"regularizer": "none"},
    {"regularizer": "jasmin", "k": 0, "lam": 1e-2, "aggregation": "mean"},
    {"regularizer": "jasmin", "k": 10, "lam": 1e-2, "aggregation": "max"},
    {"regularizer": "specformer", "lam_q": 1e-2, "lam_k": 1e-2, "lam_v": 1e-2},
]
SEEDS = [0, 1]  # 4 arms x 2 seeds = 8 trials

OWN = """
import json, sys, tempfile, time, logging
from pathlib import Path
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.run import run_trial
import torch
torch.set_num_threads(1)
logging.disable(logging.WARNING)
total = 0.0
for flat in json.loads(sys.argv[1]):
    cfg = TrialConfig.from_flat(flat)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        run_trial(cfg, Path(d), progress=False)
        total += time.perf_counter() - t0
print(json.dumps({"own_s": total}))
"""


def trial_flats(n: int) -> list[dict]:
    flats = [{**FIXED, **arm, "seed": s} for s in SEEDS for arm in GRID]
    return flats[:n]


def write_space(folder: Path, n: int) -> Path:
    import yaml

    grid = [dict(arm) for arm in GRID] if n > 1 else [dict(GRID[0])]
    space = {
        "name": "overhead",
        "fixed": FIXED,
        "grid": grid,
        "resources": {"cpu": 1, "gpu": 0},
        "max_concurrent_trials": 1,
    }
    if n > 1:
        space["repeat"] = {"seed": SEEDS}
    else:
        space["fixed"] = {**FIXED, "seed": 0}
    path = folder / f"space_{n}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def run_own(n: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", OWN, json.dumps(trial_flats(n))],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["own_s"]


def run_sweep(space: Path, work: Path) -> float:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "lipsweep",
        "sweep",
        str(space),
        "--experiment",
        "overhead",
        "--storage",
        str(work / "ray_results"),
        "--tracking-uri",
        f"sqlite:///{work / 'mlflow.db'}",
        "--num-cpus",
        "2",
        "--max-concurrent-trials",
        "1",
    ]
    env = {**os.environ, "RAY_TMPDIR": str(work / "ray_tmp")[:60]}
    (work / "ray_tmp").mkdir()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"sweep failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lso-", dir="/tmp"))
    spaces = {1: write_space(tmp, 1), N_TRIALS: write_space(tmp, N_TRIALS)}
    jobs = {
        "own": lambda: run_own(N_TRIALS),
        "sweep-1": lambda: run_sweep(spaces[1], tmp / "s1"),
        f"sweep-{N_TRIALS}": lambda: run_sweep(spaces[N_TRIALS], tmp / "s8"),
    }
    times: dict[str, list[float]] = {k: [] for k in jobs}
    for rep in range(args.reps):
        order = list(jobs)
        random.Random(rep).shuffle(order)
        for name in order:
            times[name].append(jobs[name]())
            print(f"rep {rep + 1}/{args.reps} {name}: {times[name][-1]:.1f} s", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    own, w1, w8 = med["own"], med["sweep-1"], med[f"sweep-{N_TRIALS}"]
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}, {args.reps} repetitions (medians)\n"
    )
    print("| command | wall s (median) | range |")
    print("|---|---:|---|")
    for k, v in times.items():
        print(f"| {k} | {med[k]:.1f} | {min(v):.1f}-{max(v):.1f} |")
    print(f"\nown work per trial: {own / N_TRIALS:.2f} s")
    print(
        f"all-in overhead per trial (sweep-{N_TRIALS} - own) / {N_TRIALS}: "
        f"{(w8 - own) / N_TRIALS:.2f} s"
    )
    print(
        f"marginal overhead per trial (sweep-{N_TRIALS} - sweep-1 - {N_TRIALS - 1}/8 own) / "
        f"{N_TRIALS - 1}: {(w8 - w1 - own * (N_TRIALS - 1) / N_TRIALS) / (N_TRIALS - 1):.2f} s"
    )
    print(f"fixed start-up (sweep-1 - own/{N_TRIALS}): {w1 - own / N_TRIALS:.1f} s")


if __name__ == "__main__":
    main()
