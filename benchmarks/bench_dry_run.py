"""How long `lipsweep sweep SPACE --dry-run` takes, beside `python -c "import torch"`.

The target: a dry run under 1.5 s: validating a search space must not pay for torch, Ray
or MLflow. This script runs both commands in turn (A B A B ...) as whole processes, takes
each run's wall time and the child's CPU time from ``resource.getrusage``, and prints the
medians and the per-pair ratio dry-run / import-torch, so the figure holds on a machine whose
speed drifts. It also says which heavy modules the dry run imported (none is the goal).

    python benchmarks/bench_dry_run.py [--space search_spaces/smoke.yaml] [--runs 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "mlflow", "timm", "optuna")
PROBE = (
    "import runpy, sys; sys.argv = ['lipsweep', 'sweep', {space!r}, '--dry-run'];\n"
    "try:\n    runpy.run_module('lipsweep', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print('HEAVY', sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)"
)


def _timed(cmd: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed ({proc.returncode}): {proc.stderr[-500:]}")
    return wall, cpu, proc.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="search_spaces/smoke.yaml")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    dry = [sys.executable, "-c", PROBE.format(space=args.space, heavy=HEAVY)]
    torch = [sys.executable, "-c", "import torch"]
    _timed(dry), _timed(torch)  # warm the page cache
    rows: dict[str, list[tuple[float, float]]] = {"dry-run": [], "import torch": []}
    heavy = ""
    for _ in range(args.runs):
        wall, cpu, err = _timed(dry)
        rows["dry-run"].append((wall, cpu))
        heavy = next((ln for ln in err.splitlines() if ln.startswith("HEAVY")), "HEAVY ?")
        wall, cpu, _ = _timed(torch)
        rows["import torch"].append((wall, cpu))
    for name, vals in rows.items():
        walls, cpus = [v[0] for v in vals], [v[1] for v in vals]
        print(
            f"{name:13s} wall median {statistics.median(walls):.2f} s "
            f"(min {min(walls):.2f}, max {max(walls):.2f}), "
            f"cpu median {statistics.median(cpus):.2f} s"
        )
    ratios = [d[0] / t[0] for d, t in zip(rows["dry-run"], rows["import torch"])]
    print(f"wall ratio dry-run / import torch, median of pairs: {statistics.median(ratios):.3f}")
    print(f"heavy modules the dry run imported: {heavy.removeprefix('HEAVY ')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
