# Two entry points from a fresh clone (see README):
#   make demo   the main job on the embedded default (smoke sweep -> pareto -> export)
#   make test   the test suite (the same command CI runs)
# Both install the pinned stack from uv.lock into .venv first (uv itself comes from PyPI).

PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
PYTEST_ARGS ?=

.PHONY: setup demo test test-faults study clean

$(UV):
	$(PYTHON) -m pip install --quiet --user uv || $(PYTHON) -m pip install --quiet uv

.venv/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --extra dev
	touch $@

setup: .venv/.synced

demo: setup
	$(UV) run --frozen lipsweep demo

test: setup
	$(UV) run --frozen pytest -q $(PYTEST_ARGS)

test-faults: setup
	$(UV) run --frozen pytest -q -m faults

# The first study (docs/study.md): 21 trials on the real CIFAR-10 sample (~1 h on 2 cores),
# then pareto, export, and the tables/figures of docs/study.md rebuilt from MLflow.
STUDY := study_cifar10_sample
STUDY_URI := sqlite:///study.db
study: setup
	$(UV) run --frozen lipsweep sweep search_spaces/$(STUDY).yaml --tracking-uri $(STUDY_URI)
	$(UV) run --frozen lipsweep pareto --experiment $(STUDY) --tracking-uri $(STUDY_URI)
	$(UV) run --frozen lipsweep export --experiment $(STUDY) --out exports/$(STUDY)-best \
		--force --tracking-uri $(STUDY_URI)
	$(UV) run --frozen python docs/study_report.py --experiment $(STUDY) \
		--tracking-uri $(STUDY_URI)
	if command -v chromium >/dev/null; then $(UV) run --frozen python docs/screenshot_mlflow.py \
		--experiment $(STUDY) --tracking-uri $(STUDY_URI) --view runs \
		--out docs/study/mlflow_runs.png; fi

clean:
	rm -rf .venv mlflow.db study.db mlruns ray_results runs exports
