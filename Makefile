# Two entry points from a fresh clone (see README):
#   make demo   the main job on the embedded default (smoke sweep -> pareto -> export)
#   make test   the test suite (the same command CI runs)
# Both install the pinned stack from uv.lock into .venv first (uv itself comes from PyPI).

PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
PYTEST_ARGS ?=

.PHONY: setup demo test test-faults clean

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

clean:
	rm -rf .venv mlflow.db mlruns ray_results runs exports
