#!/usr/bin/env bash
# The device checks on the GPU machine (docs/benchmarks.md, "Running it on the GPU machine"),
# each part's output under $OUT:
#   tests     the CUDA tests: fused JaSMin Triton kernels, head bounds, the train step's host
#             syncs (a failure names each sync's site), the CUDA trial resume -> cuda_tests.log
#   isa       the numerics tests under the two Intel AMX kernel combinations of the bf16
#             attention fault (meaningful only on an AMX Xeon)          -> isa_matrix_amx.*
#   lipbatch  bench_lipschitz_batch.py: ||J_f|| and token Jacobian by lip_batch_size, and a
#             profile (about 70 s)                                       -> lip_batch.json
#   suite     gpu_suite.py with its smoke trial: deadline 20 s and budget 100 s short of what
#             LIMIT_S leaves                                             -> gpu_suite.json/.log
#   rayinstall  sweep call 1 of 2 (carry [".whl-ray"]): installs the stripped Ray wheel into
#             the git-ignored .site-ray/ of the checkout, which the warm machine keeps for the
#             next call (ignored build outputs stay between calls)
#   sweep     sweep call 2 of 2 (carry [".whl", ".whl-sweep"], right after call 1):
#             gpu_sweep.py, the real `lipsweep sweep` + `pareto` + `export` through Ray and
#             MLflow at resources.gpu 0.5 then 1.0, deadline 30 s short of what LIMIT_S
#             leaves                                                     -> gpu_sweep.json/.log
# Here, once: bash benchmarks/fetch_wheels.sh (--sweep for parts rayinstall and sweep: two
# calls, docs/benchmarks.md "A sweep on the GPU"). Then one device `run`, carry [".whl"], e.g.
# timeout_s 560 and `LIMIT_S=520 bash benchmarks/device_checks.sh tests lipbatch suite`
# (about 8 minutes; no argument: tests lipbatch suite). Then here:
#   python benchmarks/merge_lipschitz_batch.py <files_at>/gpu_suite.json \
#       <files_at>/lip_batch.json --out benchmarks/gpu_suite_h100.json
#   python benchmarks/gpu_report.py benchmarks/gpu_suite_h100.json
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/device_checks}"
LIMIT_S="${LIMIT_S:-570}"  # the call's 600 s less the copy back
parts="${*:-tests lipbatch suite}"
mkdir -p "$OUT"
if [[ " $parts " == *" rayinstall "* ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target .site-ray .whl-ray/*.whl || exit 1
    echo "== sweep call 1 of 2 done at ${SECONDS} s: Ray in .site-ray; now call 2 (part sweep)"
    parts="${parts//rayinstall/}"
    [ -z "${parts// /}" ] && exit 0
fi
wheels=(.whl/*.whl)
[ -d .whl-sweep ] && wheels+=(.whl-sweep/*.whl)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${wheels[@]}" || exit 1
export PYTHONPATH="/tmp/site:$PWD/.site-ray:$PWD" PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  grep -m1 "model name" /proc/cpuinfo; grep -c amx_tile /proc/cpuinfo
  python3 -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__)"
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

if [[ " $parts " == *" tests "* ]]; then
    timeout 200 python3 -m pytest -q -p no:cacheprovider -rs -k cuda \
        tests/test_ranked_softmax_triton.py tests/test_head_bounds.py \
        tests/test_engine_syncs.py tests/test_trial.py 2>&1 | tee "$OUT/cuda_tests.log"
    echo "== tests done at ${SECONDS} s"
fi
if [[ " $parts " == *" isa "* ]]; then
    timeout 200 python3 benchmarks/isa_matrix.py --isa unset --cap default,avx2 --jobs 2 \
        --threads 4 --out "$OUT/isa_matrix_amx.json" 2>&1 | tee "$OUT/isa_matrix_amx.log"
    echo "== isa done at ${SECONDS} s"
fi
if [[ " $parts " == *" lipbatch "* ]]; then
    timeout 150 python3 benchmarks/bench_lipschitz_batch.py --device cuda \
        --out "$OUT/lip_batch.json" 2>&1 | tail -n 40
    echo "== lipbatch done at ${SECONDS} s"
fi
if [[ " $parts " == *" suite "* ]]; then
    left=$((LIMIT_S - SECONDS))
    budget=$((left - 100))
    deadline=$((left - 20))
    if [ "$budget" -lt 60 ]; then
        echo "== suite skipped: ${left} s left" | tee "$OUT/gpu_suite.log"
        exit 0
    fi
    python3 benchmarks/gpu_suite.py --device cuda --budget-s "$budget" --deadline-s "$deadline" \
        --smoke-trial --out "$OUT/gpu_suite.json" 2>&1 | tee "$OUT/gpu_suite.log"
    echo "== suite done at ${SECONDS} s"
fi
if [[ " $parts " == *" sweep "* ]]; then
    if ! python3 -c "import ray, mlflow, optuna" 2>"$OUT/gpu_sweep.log"; then
        echo "== sweep skipped: Ray/MLflow/Optuna missing (call 1, part rayinstall, first)" \
            | tee -a "$OUT/gpu_sweep.log"
        exit 1
    fi
    left=$((LIMIT_S - SECONDS - 30))
    python3 benchmarks/gpu_sweep.py --deadline-s "$left" --work /tmp/gpu_sweep \
        --out "$OUT/gpu_sweep.json" 2>&1 | tee "$OUT/gpu_sweep.log"
    echo "== sweep done at ${SECONDS} s"
fi
