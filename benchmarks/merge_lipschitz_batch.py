"""Fold a bench_lipschitz_batch.py run, and optionally a second gpu_suite.py call's compiled
phases, into a gpu_suite.py JSON of the same device, and project the trial again.

    python benchmarks/merge_lipschitz_batch.py SUITE.json LIP_BATCH.json \
        [--compiled COMPILED.json] --out MERGED.json

The merged JSON keeps every figure of SUITE.json. ``--compiled`` takes a ``gpu_suite.py
--phases regularizers_compiled,compile`` run on the same device: its ``regularizers.compiled``
and ``train.runs.bf16_compile_*`` go in (each compiled regularizer gains ``speedup_vs_eager``
and each compiled step its MFU against SUITE.json's bf16 matmul), its phases join
``meta.phases`` and ``meta.compiled_from`` names the call; ``trial.projection`` is then
projected again with them (the suite's own, eager one is kept as ``trial.projection_eager``).
LIP_BATCH.json goes in as ``lipschitz.batch``, and ``trial.projection_lipschitz_batch`` is
``gpu_suite.project_trial`` on the figures with the ||J_f|| and token-Jacobian parts at the
default ``lip_batch_size``; ``gpu_report.py`` prints both projections.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any, Optional

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_suite as gs  # noqa: E402  (benchmarks/, beside this file)

from lipsweep.lipschitz import LipschitzConfig  # noqa: E402


def _project(data: dict[str, Any]) -> dict[str, Any]:
    target = gs.load_target(Path(gs.ROOT / data["meta"]["space"]))
    return gs.project_trial(data, target, torch.device(data["meta"]["device"]))


def merge_compiled(suite: dict[str, Any], compiled: dict[str, Any]) -> dict[str, Any]:
    """SUITE with COMPILED's compiled regularizer steps and compiled train steps folded in."""
    if compiled["meta"].get("gpu") != suite["meta"].get("gpu"):
        raise ValueError(
            f"--compiled: measured on {compiled['meta'].get('gpu')!r}, "
            f"the suite on {suite['meta'].get('gpu')!r}"
        )
    out = copy.deepcopy(suite)
    eager = _get(suite, "regularizers", "variants") or {}
    regs = copy.deepcopy(_get(compiled, "regularizers", "compiled") or {})
    for name, r in regs.items():
        if isinstance(r, dict) and "step_ms" in r and "step_ms" in eager.get(name, {}):
            r["speedup_vs_eager"] = round(eager[name]["step_ms"] / r["step_ms"], 4)
    if regs:
        out.setdefault("regularizers", {})["compiled"] = regs
    train = out.setdefault("train", {})
    matmul = _get(suite, "train", "matmul", "bf16_tflops")
    for key, r in (_get(compiled, "train", "runs") or {}).items():
        r = copy.deepcopy(r)
        if matmul and r.get("model_tflops") is not None:
            r["mfu_vs_bf16_matmul"] = round(r["model_tflops"] / matmul, 4)
        train.setdefault("runs", {})[key] = r
    if "compile_backend" in compiled.get("train", {}):
        train["compile_backend"] = compiled["train"]["compile_backend"]
    meta = out["meta"]
    meta["phases"] = [p for p in meta.get("phases", []) if not _ran(p, compiled)] + [
        {**p, "call": "compiled"} for p in compiled["meta"].get("phases", [])
    ]
    meta["compiled_from"] = {
        k: compiled["meta"].get(k) for k in ("argv", "started_utc", "wall_s", "gpu")
    }
    out["errors"] = list(suite.get("errors", [])) + [
        f"compiled call: {e}" for e in compiled.get("errors", [])
    ]
    if "projection" in out.get("trial", {}):
        out["trial"]["projection_eager"] = suite["trial"]["projection"]
        out["trial"]["projection"] = _project(out)
    return out


def _ran(phase: dict[str, Any], compiled: dict[str, Any]) -> bool:
    """Whether COMPILED ran the phase PHASE names (which then replaces its record)."""
    return any(p["name"] == phase["name"] for p in compiled["meta"].get("phases", []))


def _get(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def merge(suite: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
    """SUITE with BATCH as ``lipschitz.batch`` and the trial projected with its figures."""
    b = LipschitzConfig().lip_batch_size
    out = copy.deepcopy(suite)
    out.setdefault("lipschitz", {})["batch"] = batch
    data = copy.deepcopy(suite)
    parts = data["lipschitz"]["parts"]
    parts["jacobian"]["s_per_image"] = batch[f"jacobian_b{b}"]["ms_per_image"] / 1e3
    parts["tokens"]["s_per_image"] = batch[f"tokens_b{b}"]["ms_per_image"] / 1e3
    proj = _project(data)
    proj["lipschitz_from"] = f"bench_lipschitz_batch.py, batch {b}, {batch.get('device')}"
    out.setdefault("trial", {})["projection_lipschitz_batch"] = proj
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("suite", type=Path)
    p.add_argument("batch", type=Path)
    p.add_argument("--compiled", type=Path, help="a gpu_suite.py run of the compiled phases")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    suite = json.loads(args.suite.read_text())
    if args.compiled is not None:
        try:
            suite = merge_compiled(suite, json.loads(args.compiled.read_text()))
        except ValueError as err:
            print(f"merge_lipschitz_batch.py: error: {err}", file=sys.stderr)
            return 2
    merged = merge(suite, json.loads(args.batch.read_text()))
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
