"""How the batched ||J_f|| and token-Jacobian routes scale with the batch on one device.

ViT-B (the suite's shape: 32 px, patch 4, 65 tokens) at C = 100 from random init: the
default (Lanczos, fp32) route of ``jacobian_norm_result`` at ``lip_batch_size`` 64, 128, 256 and
512 on the same images, ms per image and peak memory; the token Jacobian at 64 and 256; and
torch.profiler's top CUDA kernels of one batch at 256. A short, prepared device check:

    python3 benchmarks/bench_lipschitz_batch.py --device cuda --out $OUT/lip_batch.json
    python benchmarks/bench_lipschitz_batch.py --device cpu --quick --out /tmp/q.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_suite as gs  # noqa: E402  (benchmarks/, beside this file)

from lipsweep.lipschitz import jacobian_norm_result  # noqa: E402
from lipsweep.lipschitz.token_jacobian import token_jacobian_norm_result  # noqa: E402

_log = logging.getLogger("bench_lipschitz_batch")


def _timed(fn: Any, device: torch.device) -> tuple[float, Any]:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], required=True)
    p.add_argument("--quick", action="store_true", help="tiny ViT, same code path")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%X")
    dev = torch.device(args.device)
    sizes = gs.QUICK if args.quick else gs.FULL
    batches = (4, 8) if args.quick else (64, 128, 256, 512)
    n = max(batches)
    model = gs.build_vit(sizes, 100, dev).eval()
    x = torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(2)).to(dev)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"}
    jacobian_norm_result(model, x[:2], 100, route="lanczos")  # warm-up
    base = None
    for b in batches:
        try:
            s, res = _timed(lambda: jacobian_norm_result(model, x, 100, batch_size=b), dev)
        except torch.OutOfMemoryError as exc:
            out[f"jacobian_b{b}"] = {"error": f"out of memory: {str(exc).splitlines()[0]}"}
            _log.info("jacobian batch %d: out of memory", b)
            torch.cuda.empty_cache()
            continue
        vals = res.values.double()
        base = vals if base is None else base
        out[f"jacobian_b{b}"] = r = {
            "route": res.route,
            "ms_per_image": round(s * 1e3 / n, 3),
            "mean_iterations": round(float(res.iterations.double().mean()), 2),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
            if dev.type == "cuda"
            else None,
            "max_rel_dev_vs_first_batch": float(((vals - base).abs() / base).max()),
        }
        _log.info("jacobian batch %d: %s", b, r)
    for b in batches[:1] + batches[2:3]:
        s, res = _timed(
            lambda: torch.cat(
                [
                    token_jacobian_norm_result(model, x[i : i + b], 100).values
                    for i in range(0, n, b)
                ]
            ),
            dev,
        )
        out[f"tokens_b{b}"] = r = {"ms_per_image": round(s * 1e3 / n, 3)}
        _log.info("tokens batch %d: %s", b, r)
    if dev.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        b = batches[2]
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            jacobian_norm_result(model, x[:b], 100, batch_size=b)
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        out["profile_b256_top_kernels"] = table
        print(table)
    args.out.write_text(json.dumps(out, indent=1))
    _log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
