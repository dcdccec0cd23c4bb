"""How long a finished trial's artifact logging holds Tune's control loop: inline uploads (a
variant kept here for comparison) against the upload queue, side by side in one run.

Tune schedules nothing while a callback runs. The inline variant copies the final checkpoint's
files into a temporary folder and uploads them (and its Lipschitz artifacts) inside
``on_trial_complete``; ``MlflowSweepCallback._log_checkpoint`` queues the upload for the driver
tracker's background thread and returns. This script times, on a real SQLite MLflow store with
its local artifact store and a real ``ray.tune.Checkpoint`` folder (no Ray cluster needed):

* ``before``: the inline variant (below);
* ``after``: ``MlflowSweepCallback._log_checkpoint`` (the time the loop is held), and the time
  until the background upload has landed (``Tracker.flush``), which the loop does not wait for.

Each repetition uses a fresh store and runs both, in alternating order; medians are reported,
and the ratio before/after of the time the loop is held.

    python benchmarks/bench_artifact_upload.py                  # 344 MB (ViT-B fp32), 3 reps
    python benchmarks/bench_artifact_upload.py --mb 88 --reps 5 # ViT-S size
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def old_log_checkpoint(tracker, run_id: str, trial) -> None:
    """``MlflowSweepCallback._log_checkpoint`` as it was with inline uploads."""
    from lipsweep.tracking import TAG_CHECKPOINT

    ckpt = trial.checkpoint
    if ckpt is None:
        return
    tracker.set_tags(run_id, {TAG_CHECKPOINT: ckpt.path})
    with ckpt.as_directory() as src:
        src = Path(src)
        if (src / "artifacts").is_dir():
            tracker.log_artifacts(run_id, src / "artifacts", "lipschitz")
        with tempfile.TemporaryDirectory() as tmp:
            dst = Path(tmp) / "checkpoint"
            dst.mkdir()
            for name in ("model.safetensors", "config.json", "metrics.json"):
                if (src / name).is_file():
                    (dst / name).write_bytes((src / name).read_bytes())
            tracker.log_artifacts(run_id, dst, "checkpoint")


def final_folder(root: Path, mb: int) -> Path:
    """A final checkpoint folder as trainable.py writes it, with ``mb`` MB of weights."""
    root.mkdir(parents=True)
    with open(root / "model.safetensors", "wb") as fh:
        for _ in range(mb):
            fh.write(os.urandom(1 << 20))
    (root / "config.json").write_text("{}")
    (root / "metrics.json").write_text(json.dumps({"acc_clean": 50.0}))
    (root / "artifacts").mkdir()
    (root / "artifacts" / "lipschitz.npz").write_bytes(os.urandom(1 << 20))
    return root


def one(kind: str, work: Path, ckpt) -> dict[str, float]:
    """Time one trial's artifact logging on a fresh store; returns seconds."""
    from lipsweep.sweep.callbacks import MlflowSweepCallback
    from lipsweep.tracking import FINISHED, Tracker

    tracker = Tracker(f"sqlite:///{work / f'{kind}.db'}", "bench", buffer_writes=True)
    parent = tracker.open_parent(str(work / kind), "bench", {})
    run = tracker.open_child(parent, "t", "t", {})
    trial = SimpleNamespace(checkpoint=ckpt)
    t0 = time.perf_counter()
    if kind == "before":
        old_log_checkpoint(tracker, run, trial)
    else:
        MlflowSweepCallback(tracker, parent)._log_checkpoint(run, trial)
    tracker.end(run, FINISHED)
    held = time.perf_counter() - t0
    left = tracker.flush(600)
    landed = time.perf_counter() - t0
    assert left == 0, f"{left} writes not delivered"
    got = tracker.list_artifacts(run, "checkpoint")
    assert {Path(a.path).name for a in got} >= {"model.safetensors"}, got
    return {"held_s": held, "landed_s": landed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=344, help="weights size in MB (ViT-B fp32: 344)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from ray import tune

    rows: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
        src = final_folder(Path(tmp) / "final", args.mb)
        ckpt = tune.Checkpoint.from_directory(str(src))
        for rep in range(args.reps):
            order = ("before", "after") if rep % 2 == 0 else ("after", "before")
            for kind in order:
                work = Path(tmp) / f"rep{rep}"
                work.mkdir(exist_ok=True)
                rows[kind].append(one(kind, work, ckpt))
                print(kind, rep, {k: round(v, 3) for k, v in rows[kind][-1].items()})
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in rows.items()}
    rng = {
        k: {m: (min(r[m] for r in v), max(r[m] for r in v)) for m in v[0]} for k, v in rows.items()
    }
    print(f"\n{platform.node()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"{args.mb} MB weights, {args.reps} reps, medians (range):")
    for kind in ("before", "after"):
        for m in ("held_s", "landed_s"):
            lo, hi = rng[kind][m]
            print(f"  {kind:6s} {m:9s} {med[kind][m]:8.3f}  ({lo:.3f}-{hi:.3f})")
    ratio = med["before"]["held_s"] / med["after"]["held_s"]
    print(f"Tune's loop held: before/after = {ratio:.0f}x")


if __name__ == "__main__":
    main()
