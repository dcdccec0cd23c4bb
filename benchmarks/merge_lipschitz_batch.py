"""Fold a bench_lipschitz_batch.py run into a gpu_suite.py JSON of the same device and project
the trial again with its ||J_f|| and token-Jacobian parts at the default ``lip_batch_size``.

    python benchmarks/merge_lipschitz_batch.py SUITE.json LIP_BATCH.json --out MERGED.json

The merged JSON keeps every figure of SUITE.json, adds ``lipschitz.batch`` (LIP_BATCH.json as
it is) and ``trial.projection_lipschitz_batch`` (``gpu_suite.project_trial`` on the suite's
figures with those two parts replaced); ``gpu_report.py`` prints both projections.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_suite as gs  # noqa: E402  (benchmarks/, beside this file)

from lipsweep.lipschitz import LipschitzConfig  # noqa: E402


def merge(suite: dict, batch: dict) -> dict:
    b = LipschitzConfig().lip_batch_size
    out = copy.deepcopy(suite)
    out.setdefault("lipschitz", {})["batch"] = batch
    data = copy.deepcopy(suite)
    parts = data["lipschitz"]["parts"]
    parts["jacobian"]["s_per_image"] = batch[f"jacobian_b{b}"]["ms_per_image"] / 1e3
    parts["tokens"]["s_per_image"] = batch[f"tokens_b{b}"]["ms_per_image"] / 1e3
    target = gs.load_target(Path(gs.ROOT / suite["meta"]["space"]))
    proj = gs.project_trial(data, target, torch.device(suite["meta"]["device"]))
    proj["lipschitz_from"] = f"bench_lipschitz_batch.py, batch {b}, {batch.get('device')}"
    out.setdefault("trial", {})["projection_lipschitz_batch"] = proj
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("suite", type=Path)
    p.add_argument("batch", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    merged = merge(json.loads(args.suite.read_text()), json.loads(args.batch.read_text()))
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
