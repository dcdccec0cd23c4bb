#!/usr/bin/env bash
# Fetch the wheels the GPU machine lacks into git-ignored folders beside the checkout.
#
# The GPU machine (docs/benchmarks.md, "Running it on the GPU machine") has Python 3.12, torch 2.11, timm, numpy,
# PyYAML, safetensors, tqdm, pandas, pyarrow and matplotlib, no network, and none of the
# packages below. Each is the lock's version (uv.lock), downloaded from PyPI on this machine.
#
#   .whl/        what gpu_suite.py, the CUDA tests and `lipsweep train` need (device_checks.sh
#                parts tests, isa, lipbatch, suite): pyautoattack 0.2.0 (AutoAttack, without its
#                44 MB of example models), timm 1.0.31, torchattacks 3.5.1, hypothesis 6.170.15.
#   --sweep adds what `lipsweep sweep`, `pareto` and `export` import (device_checks.sh part
#   `sweep`, benchmarks/gpu_sweep.py), split over two device calls of one warm machine because
#   the checkout and all the wheels pass 64 MiB:
#   .whl-ray/    call 1 of 2: Ray 2.60.0 without ray/jars, ray/rllib, ray/serve, ray/llm and
#                ray/dashboard/client (RECORD rewritten), installed into the checkout's
#                git-ignored .site-ray/, which the warm machine keeps for the next call.
#   .whl-sweep/  call 2 of 2 (with .whl): Ray's and Tune's missing needs (jsonschema,
#                referencing, rpds-py, pydantic, tensorboardX, ...), MLflow (mlflow without its
#                UI bundle, mlflow-skinny, mlflow-tracing, SQLAlchemy, Alembic, OpenTelemetry,
#                and what `import mlflow` and its SQLite store import: FastAPI, Starlette,
#                databricks-sdk, cryptography), Optuna and moocore. Checked in a Python 3.12
#                venv holding only the machine's packages (docs/benchmarks.md, "A sweep on the
#                GPU").
#
# Usage (from anywhere):  bash benchmarks/fetch_wheels.sh [--sweep]
# Then on the device:     python3 -m pip install -q --no-index --no-deps --no-compile \
#                           --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#                           && export PYTHONPATH=/tmp/site
# (device_checks.sh does this; its part `sweep` says which call is which.)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
sweep=0
case "${1:-}" in
    --sweep) sweep=1 ;;
    "") ;;
    *) echo "fetch_wheels.sh: error: unknown argument ${1} (known: --sweep)" >&2; exit 2 ;;
esac

download() {  # download DEST NAME==VERSION...
    local dest="$1"; shift
    rm -rf "$dest"
    mkdir -p "$dest"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 -d "$dest" "$@"
}

strip_wheel() {  # strip_wheel GLOB PREFIX...: rewrite the wheel without PREFIX* (and RECORD)
    "$PY" - "$@" <<'PYEOF'
import glob, os, sys, zipfile
pattern, prefixes = sys.argv[1], tuple(sys.argv[2:])
(src,) = glob.glob(pattern)
tmp = src + ".tmp"
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if item.filename.startswith(prefixes):
            continue
        data = zin.read(item.filename)
        if item.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(l for l in lines if not l.startswith(prefixes)).encode()
        zout.writestr(item, data)
os.replace(tmp, src)
PYEOF
}

download .whl pyautoattack==0.2.0 timm==1.0.31 torchattacks==3.5.1 hypothesis==6.170.15
# AutoAttack never loads pyautoattack's example models.
strip_wheel ".whl/pyautoattack-*.whl" pyautoattack/examples/

if [ "$sweep" = 1 ]; then
    download .whl-ray ray==2.60.0
    # A local Tune sweep needs none of these: Java workers, RLlib, Serve, the LLM libraries,
    # the dashboard's web UI (its agent stays: every node starts it).
    strip_wheel ".whl-ray/ray-*.whl" ray/jars/ ray/rllib/ ray/serve/ ray/llm/ \
        ray/dashboard/client/
    download .whl-sweep \
        jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
        rpds-py==2026.9.1 tensorboardx==2.6.5 pydantic==2.14.3 pydantic-core==2.50.4 \
        annotated-types==0.8.0 typing-inspection==0.4.5 \
        mlflow==3.17.0 mlflow-skinny==3.17.0 mlflow-tracing==3.17.0 sqlalchemy==2.1.9 \
        alembic==1.20.1 mako==1.4.3 cachetools==7.3.2 opentelemetry-api==1.45.2 \
        opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2 \
        opentelemetry-semantic-conventions==0.66b2 sqlparse==0.6.1 importlib-metadata==9.1.0 \
        fastapi==0.165.0 starlette==1.10.0 databricks-sdk==0.156.0 cryptography==50.0.2 \
        optuna==5.0.0 colorlog==6.12.0 moocore==0.3.2 cffi==2.1.1 pycparser==3.12 \
        platformdirs==4.14.7
    # The MLflow UI's JavaScript bundle: the sweep writes to SQLite and serves nothing.
    strip_wheel ".whl-sweep/mlflow-3*.whl" mlflow/server/js/
fi
ls -l .whl .whl-ray .whl-sweep 2>/dev/null || ls -l .whl
"$PY" - "$sweep" <<'PYEOF'
import subprocess, sys
from pathlib import Path
mib = lambda paths: sum(p.stat().st_size for d in paths for p in Path(d).rglob("*") if p.is_file()) / 2**20
files = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True, check=True)
tree = sum(Path(f).stat().st_size for f in files.stdout.split("\0") if f and Path(f).is_file()) / 2**20
print(f"tracked tree {tree:.1f} MiB; .whl {mib(['.whl']):.1f} MiB (limit per call: 64 MiB)")
if sys.argv[1] == "1":
    print(f"sweep call 1 of 2, carry ['.whl-ray']: {tree + mib(['.whl-ray']):.1f} MiB")
    print(f"sweep call 2 of 2, carry ['.whl', '.whl-sweep']: "
          f"{tree + mib(['.whl', '.whl-sweep']):.1f} MiB")
PYEOF
