#!/usr/bin/env bash
# Make the Python on PATH run lipsweep with the pinned stack of uv.lock. `ray up` runs this on
# every node (ray_cluster.yaml `setup_commands`), after mounting the project at ~/lipsweep.
#
# - On the image built from deploy/Dockerfile (or any machine whose Python already has the pinned
#   ray / mlflow / torch and an editable lipsweep from the mounted copy) it checks and returns.
#   ray_cluster.yaml runs it with --check: a node start installs nothing.
# - Without --check, on the stock rayproject/ray image (the loopback twin, or a fallback) it
#   installs exactly the versions in uv.lock into the image's Python (a few minutes: torch with its
#   CUDA wheels is ~3 GB), then puts the mounted ~/lipsweep on the Python path with a .pth file in
#   site-packages. (An editable install would write lipsweep.egg-info into the mounted folder,
#   which Docker created owned by root: "Permission denied" for the container user ray.)
#
# `--check` only checks (exit 1 on a mismatch) and installs nothing. `--gpu` also requires that
# torch sees CUDA (GPU workers: ray_cluster.yaml `worker_setup_commands`), and says why not.
# Settings: LIPSWEEP_PROJECT_DIR [~/lipsweep], UV_VERSION [0.13.9].
set -euo pipefail

check_only=0
need_gpu=0
for arg in "$@"; do
    case "$arg" in
        --check) check_only=1 ;;
        --gpu) need_gpu=1 ;;
        *) echo "setup_node.sh: unknown argument $arg (use --check, --gpu)" >&2; exit 2 ;;
    esac
done

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

gpu_ok() {
    # torch sees CUDA, or the reason it does not (torch build, visible devices, driver).
    "$python_bin" - <<'EOF'
import os, subprocess, sys
import torch
if torch.cuda.is_available():
    print(f"setup_node.sh: CUDA visible: {torch.cuda.device_count()} x "
          f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})")
    sys.exit(0)
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True,
                         timeout=30).stdout.strip() or "no GPU listed"
except (OSError, subprocess.TimeoutExpired) as exc:
    smi = f"unavailable ({exc.__class__.__name__}): the container got no GPUs"
print(f"setup_node.sh: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA "
      f"device; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}; "
      f"nvidia-smi: {smi}. A GPU worker needs docker --gpus all (worker_run_options), the "
      "NVIDIA container toolkit and a driver >= 580 (torch's CUDA 13 build)", file=sys.stderr)
sys.exit(1)
EOF
}

if stack_ok; then
    echo "setup_node.sh: pinned stack present in $python_bin; nothing to install"
    if [ "$need_gpu" = 1 ]; then
        gpu_ok
    fi
    exit 0
fi
if [ "$check_only" = 1 ]; then
    exit 1
fi

echo "setup_node.sh: installing uv.lock's stack into $python_bin"
"$python_bin" -m pip install --quiet "uv==$uv_version"
req="$(mktemp /tmp/lipsweep-requirements.XXXXXX.txt)"
(cd "$project" && "$python_bin" -m uv export --frozen --no-dev --no-emit-project --no-hashes \
    --quiet -o "$req")
"$python_bin" -m uv pip install --python "$python_bin" --quiet -r "$req"
rm -f "$req"
site="$("$python_bin" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$project" > "$site/lipsweep.pth"
stack_ok
if [ "$need_gpu" = 1 ]; then
    gpu_ok
fi
echo "setup_node.sh: done"
