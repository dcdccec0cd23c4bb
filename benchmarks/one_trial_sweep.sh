#!/bin/sh
# One `lipsweep sweep` of the tests' smallest space (tests/_sweep_helpers.py write_space: a
# 2-block width-64 ViT, 256 training images, 2 epochs, one trial, --num-cpus 2) in a fresh
# folder with a fresh SQLite store, from the checkout $1 (default: this one). Time it as a
# whole process, e.g. `/usr/bin/time -v benchmarks/one_trial_sweep.sh`, or two checkouts in
# turn: the figures in docs/benchmarks.md ("The sweep driver without torch") come from it.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-$repo}
d=$(mktemp -d "${TMPDIR:-/tmp}/one_trial_sweep.XXXXXX")
trap 'rm -rf "$d"' EXIT
"$repo/.venv/bin/python" - "$d/space.yaml" <<PY
import sys
sys.path.insert(0, "$repo/tests")
from pathlib import Path
from _sweep_helpers import write_space
Path(sys.argv[1]).write_text(write_space(Path(sys.argv[1]).parent, "  - regularizer: none\n").read_text())
PY
cd "$d"
RAY_TMPDIR="$d/rt" PYTHONPATH="$src" "$repo/.venv/bin/python" -m lipsweep sweep space.yaml \
  --experiment e --storage "$d/rr" --num-cpus 2 --tracking-uri "sqlite:///$d/m.db" > "$d/log" 2>&1 \
  || { tail -20 "$d/log"; exit 1; }
