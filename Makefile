# Two entry points from a fresh clone (see README):
#   make demo   the main job on the embedded default (smoke sweep -> pareto -> export)
#   make test   the test suite (the same command CI runs)
# Both install the pinned stack from uv.lock into .venv first (uv itself comes from PyPI
# into .tools/ unless it is on PATH). Afterwards: `.venv/bin/lipsweep ...` or
# `source .venv/bin/activate` (`uv run` needs uv on PATH, which setup does not put there).

PYTHON ?= python3
# uv: the one on PATH, else a private copy in .tools/ (never ~/.local/bin). .tools/ is a venv of
# $(PYTHON), so a Debian/Ubuntu python3 marked EXTERNALLY-MANAGED installs into it; without
# python3-venv, pip --target (which PEP 668 allows) puts uv in .tools/lib instead.
UV_VERSION := 0.13.9
TOOLS := .tools
UV ?= $(or $(shell command -v uv 2>/dev/null),$(CURDIR)/$(TOOLS)/bin/uv)
# An active venv is not the project's: unset VIRTUAL_ENV so uv does not warn; Ray's workers use
# .venv as it is, not a uv env rebuilt per session (which warns that VIRTUAL_ENV does not match).
# MLflow's artifact progress bars run together on one line in a log: off.
RUN := env -u VIRTUAL_ENV RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 \
	MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false $(UV) run --frozen
PYTEST_ARGS ?=

.PHONY: setup demo test test-avx2 test-amx-fault isa-matrix lint wheel-check test-faults study \
	optuna-dashboard clean

$(CURDIR)/$(TOOLS)/bin/uv:
	rm -rf $(TOOLS)
	($(PYTHON) -m venv $(TOOLS) && $(TOOLS)/bin/python -m pip install --quiet uv==$(UV_VERSION)) \
	|| (rm -rf $(TOOLS) && $(PYTHON) -m pip install --quiet --target $(TOOLS)/lib \
	    uv==$(UV_VERSION) && mkdir -p $(TOOLS)/bin && ln -sf ../lib/bin/uv $(TOOLS)/bin/uv) \
	|| { echo "could not install uv with $(PYTHON): install python3-venv or python3-pip," \
	     "or uv itself (https://docs.astral.sh/uv/)" >&2; exit 1; }

# --quiet: uv's list of the ~160 packages it installed is noise; errors still show.
.venv/.synced: pyproject.toml uv.lock | $(UV)
	@echo "installing the locked stack (uv.lock) into .venv: about 6 GB, minutes the first time"
	env -u VIRTUAL_ENV $(UV) sync --frozen --extra dev --quiet
	touch $@

setup: .venv/.synced

demo: setup
	$(RUN) lipsweep demo

# Two workers (pytest-xdist): one runs every test that starts Ray, the other the rest
# (tests/conftest.py). PYTHONFAULTHANDLER: a crash anywhere, interpreter exit included, prints
# every thread's stack.
test: setup
	PYTHONFAULTHANDLER=1 $(RUN) pytest -q -n 2 --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# The habits CI holds the code to: ruff's rule set and format ([tool.ruff] in pyproject.toml),
# and deptry: every distribution lipsweep/ imports is declared ([tool.deptry]).
lint: setup
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) deptry lipsweep

# The wheel a user installs: built, installed with --no-deps into a fresh target
# beside the locked .venv (which supplies the dependencies), and run from an empty folder, so
# nothing of the checkout (search_spaces/, configs/) stands in for the package data. CI runs it
# after `make lint`; it removes setuptools' build/ and lipsweep.egg-info/ unless they were there.
wheel-check: setup
	@set -e; tmp=$$(mktemp -d); made=""; \
	for d in build lipsweep.egg-info; do [ -e "$$d" ] || made="$$made $(CURDIR)/$$d"; done; \
	trap 'rm -rf "$$tmp" $$made' EXIT; \
	env -u VIRTUAL_ENV $(UV) build --quiet --wheel --out-dir "$$tmp/dist"; \
	env -u VIRTUAL_ENV $(UV) pip install --quiet --no-deps --python .venv/bin/python \
		--target "$$tmp/site" "$$tmp"/dist/lipsweep-*.whl; \
	mkdir "$$tmp/empty"; cd "$$tmp/empty"; \
	py="env PYTHONPATH=$$tmp/site $(CURDIR)/.venv/bin/python"; \
	echo "built $$(basename "$$tmp"/dist/lipsweep-*.whl)"; \
	$$py -c 'import lipsweep, sys; assert lipsweep.__file__.startswith(sys.argv[1]), lipsweep.__file__' "$$tmp/site"; \
	$$py -m lipsweep --version; \
	$$py -m lipsweep demo --help >/dev/null && echo "lipsweep demo --help: ok"; \
	$$py -m lipsweep spaces; \
	$$py -m lipsweep sweep paper_cifar10 --dry-run >"$$tmp/plan"; tail -n 2 "$$tmp/plan"; \
	test -z "$$(ls -A)" || { echo "wheel-check: the commands wrote into the empty folder" >&2; exit 1; }

# The numerics tests once more on AVX2 kernels (oneDNN and ATen's own dispatch), as on a CPU
# without AVX-512: their tolerances must follow from the dtype and the problem, not from the
# kernel's summation order or tie-breaking. CI runs it after `make test`.
NUMERICS_TESTS := tests/test_regularizers.py tests/test_jasmin_math.py tests/test_specformer.py \
	tests/test_lipschitz_jacobian.py tests/test_lipschitz_margin.py \
	tests/test_lipschitz_summary.py tests/test_head_bounds.py tests/test_attacks.py \
	tests/test_autoattack.py tests/test_precision.py
# On both cores, a test file at a time as in `make test` (the environment reaches the workers).
NUMERICS_XDIST := -n 2 --dist loadgroup
test-avx2: setup
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(RUN) pytest -q $(NUMERICS_XDIST) $(NUMERICS_TESTS)

# The numerics tests with PyTorch's CPU flash attention failing on bf16, as it does on an Intel
# AMX host with ATen's kernels below AVX-512 (tests/_amx_fault.py; docs/reliability.md): every bf16
# forward must take lipsweep.vit.precision's route around it. CI runs it after `make test-avx2`.
test-amx-fault: setup
	LIPSWEEP_TEST_AMX_FAULT=1 $(RUN) pytest -q $(NUMERICS_XDIST) $(NUMERICS_TESTS)

# The numerics tests under every CPU kernel combination (benchmarks/isa_matrix.py: 4 oneDNN caps x
# 4 ATen capabilities, each in a fresh pytest process; about 35 min on 2 cores). A table on
# stdout, the rows with what each process really ran on in reports/isa_matrix.json. Narrow it
# with ISA_ARGS, e.g. ISA_ARGS="--isa unset --cap default,avx2 --jobs 2 --threads 1".
ISA_ARGS ?=
isa-matrix: setup
	mkdir -p reports
	$(RUN) python benchmarks/isa_matrix.py --out reports/isa_matrix.json $(ISA_ARGS)

test-faults: setup
	$(RUN) pytest -q -m faults

# The first study (docs/study.md): 21 trials on the real CIFAR-10 sample (~1 h on 2 cores),
# then pareto (over arms: 3 seeds each), export, and `lipsweep report` (arm table, paired
# t-tests, figures) into docs/study/report/, also logged to the sweep's parent run.
STUDY := study_cifar10_sample
STUDY_URI := sqlite:///study.db
study: setup
	$(RUN) lipsweep sweep search_spaces/$(STUDY).yaml --tracking-uri $(STUDY_URI)
	$(RUN) lipsweep pareto --experiment $(STUDY) --tracking-uri $(STUDY_URI)
	$(RUN) lipsweep export --experiment $(STUDY) --out exports/$(STUDY)-best \
		--force --tracking-uri $(STUDY_URI)
	$(RUN) lipsweep report --experiment $(STUDY) --out docs/study/report \
		--tracking-uri $(STUDY_URI)
	if command -v chromium >/dev/null; then $(RUN) python docs/screenshot_mlflow.py \
		--experiment $(STUDY) --tracking-uri $(STUDY_URI) --view runs \
		--out docs/study/mlflow_runs.png; fi

# The Optuna study of a `search:` sweep in optuna-dashboard on http://127.0.0.1:8080, from
# .venv (the lock's `dashboard` extra, installed on first use; never the system pip).
# OPTUNA_DB: the study file the sweep logged (default: the one beside sqlite:///mlflow.db).
OPTUNA_DB ?= mlflow.optuna.db
optuna-dashboard: setup
	$(RUN) --extra dashboard optuna-dashboard --host 127.0.0.1 --port 8080 \
		sqlite:///$(abspath $(OPTUNA_DB))

# Start over: everything setup, the demo, the study, `lipsweep report` (default --out
# reports/), `lipsweep bench-search` (default --out bench-search/), the Optuna studies beside
# the MLflow stores and the README's examples write.
clean:
	rm -rf .venv .tools mlflow.db mlflow.db.lock mlflow.optuna.db study.db study.db.lock \
		study.optuna.db mlruns mlartifacts ray_results runs exports reports nb-export my100.npz \
		bench-search
