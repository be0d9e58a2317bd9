# Every target installs what it needs into .venv first (Python 3.11+ and make are all it takes).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-unit lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)  ## generated traffic through the whole pipeline on the embedded services
	$(PY) -m pipeline demo

test: $(STAMP)  ## unit + integration tests (starts and stops its own Kafka and MongoDB)
	$(PY) -m pytest -q

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check pipeline tests
	$(VENV)/bin/mypy

bench: $(STAMP)  ## measures and writes bench-results/*.json and docs/benchmarks.md figures
	$(PY) -m pipeline.bench.hits --out bench-results/hits.json

clean:
	rm -rf $(VENV) .preagg bench-results .pytest_cache .mypy_cache .ruff_cache
