"""Write ``lipsweep/sweep/gpu_measured.json``: for each kept GPU suite JSON, the figures the
trial projection reads (``lipsweep.sweep.projection.compact_figures``), which
``lipsweep sweep SPACE --dry-run`` projects the grid's GPU-hours with.

    python benchmarks/gpu_measured.py benchmarks/gpu_suite_h100.json benchmarks/gpu_suite_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from lipsweep.sweep.projection import MEASURED_FILE, compact_figures

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "lipsweep" / "sweep" / MEASURED_FILE


def build(paths: list[Path]) -> dict:
    """The kept file's content for these suite JSONs, in their order."""
    gpus = []
    for path in paths:
        figures = compact_figures(json.loads(path.read_text()))
        figures["source"] = str(path.resolve().relative_to(ROOT))
        gpus.append(figures)
    return {"gpus": gpus}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("suites", type=Path, nargs="+")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    args.out.write_text(json.dumps(build(args.suites), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
