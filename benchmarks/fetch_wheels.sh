#!/usr/bin/env bash
# Fetch the wheels benchmarks/gpu_suite.py needs on the GPU machine into .whl/ (git-ignored).
#
# The GPU machine (docs/benchmarks.md, "GPU path") has Python 3.12, torch 2.11, timm, numpy,
# PyYAML, safetensors, tqdm and matplotlib, no network, and no pyautoattack. This downloads,
# from PyPI, on this machine:
#   - pyautoattack==0.2.0  (AutoAttack; pure Python, needs only torch and numpy), and
#   - timm==1.0.31         (the lock's version, so the ViT is built by the same timm code),
#   - torchattacks==3.5.1 and hypothesis==6.170.15 (the lock's: the numerics tests that
#     isa_matrix.py and device_checks.sh run there check the attacks against torchattacks).
# Ray, MLflow and Optuna are not needed: the suite and `lipsweep train` import none of them.
#
# Usage (from anywhere):  bash benchmarks/fetch_wheels.sh
# Then on the device:     python3 -m pip install -q --no-index --no-deps --no-compile \
#                           --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#                           && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
rm -rf .whl
mkdir -p .whl
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl pyautoattack==0.2.0 timm==1.0.31 torchattacks==3.5.1 \
    hypothesis==6.170.15
# pyautoattack's wheel is 44 of its 45 MB example models (pyautoattack/examples/), which
# AutoAttack never loads: rewrite it without them (and their RECORD lines), so the wheels
# take ~3 of the 64 MiB a device call carries.
"$PY" - <<'PYEOF'
import glob, zipfile, os
(src,) = glob.glob(".whl/pyautoattack-*.whl")
tmp = src + ".tmp"
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if item.filename.startswith("pyautoattack/examples/"):
            continue
        data = zin.read(item.filename)
        if item.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(l for l in lines if not l.startswith("pyautoattack/examples/")).encode()
        zout.writestr(item, data)
os.replace(tmp, src)
PYEOF
ls -l .whl
