#!/usr/bin/env bash
# Make the Python on PATH run lipsweep with the pinned stack of uv.lock. `ray up` runs this on
# every node (ray_cluster.yaml `setup_commands`), after mounting the project at ~/lipsweep.
#
# - On the image built from deploy/Dockerfile (or any machine whose Python already has the pinned
#   ray / mlflow / torch and an editable lipsweep from the mounted copy) it checks and returns.
# - On the stock rayproject/ray image it installs exactly the versions in uv.lock into the image's
#   Python (a few minutes: torch with its CUDA wheels is ~3 GB), then lipsweep itself, editable, so
#   later `ray up` runs pick up code changes from the re-synced ~/lipsweep without reinstalling.
#
# `setup_node.sh --check` only checks (exit 1 on a mismatch) and installs nothing.
# Settings: LIPSWEEP_PROJECT_DIR [~/lipsweep], UV_VERSION [0.13.9].
set -euo pipefail

project="${LIPSWEEP_PROJECT_DIR:-$HOME/lipsweep}"
uv_version="${UV_VERSION:-0.13.9}"
python_bin="$(command -v python)"

stack_ok() {
    # The lock's pins for the three packages that must match across nodes, and lipsweep importable.
    (cd "$project" && "$python_bin" - <<'EOF'
import importlib.metadata as md, re, sys
lock = open("uv.lock").read()
bad = []
for name in ("ray", "mlflow", "torch"):
    want = re.search(r'\[\[package\]\]\nname = "%s"\nversion = "([^"]+)"' % name, lock).group(1)
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or have.split("+")[0] != want:
        bad.append(f"{name} {have} (lock: {want})")
try:
    import lipsweep  # noqa: F401
except Exception as exc:  # noqa: BLE001
    bad.append(f"lipsweep not importable: {exc}")
if bad:
    print("setup_node.sh: " + "; ".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
    )
}

if stack_ok; then
    echo "setup_node.sh: pinned stack present in $python_bin; nothing to install"
    exit 0
fi
if [ "${1:-}" = "--check" ]; then
    exit 1
fi

echo "setup_node.sh: installing uv.lock's stack into $python_bin"
"$python_bin" -m pip install --quiet "uv==$uv_version"
req="$(mktemp /tmp/lipsweep-requirements.XXXXXX.txt)"
(cd "$project" && "$python_bin" -m uv export --frozen --no-dev --no-emit-project --no-hashes \
    --quiet -o "$req")
"$python_bin" -m uv pip install --python "$python_bin" --quiet -r "$req"
"$python_bin" -m uv pip install --python "$python_bin" --quiet --no-deps -e "$project"
rm -f "$req"
stack_ok
echo "setup_node.sh: done"
