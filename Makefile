# Fresh machine: `make demo` sets up .venv and runs the demo; `make test` sets up and runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint bench clean

# --no-compile: pip would byte-compile every module of torch, transformers and the rest (55 of
# the install's 145 CPU seconds here); Python compiles the few that are imported, once, on use.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -e '.[demo,test,spy]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/mpwatch demo/mnist.py

# Static checks first (seconds): a renderer reading a status key the schema lacks fails here.
lint: $(STAMP)
	$(BIN)/ruff check mpwatch
	$(BIN)/mypy

# Two lanes (pytest-xdist): the tests wait on real processes far more than they compute. The
# runs recorded once per session stay in one lane (xdist group `recorded`); LANES=0: no lanes, one process.
LANES ?= 2
test: lint
	$(BIN)/python -m pytest -q -rs -n $(LANES) --dist loadgroup

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) mpwatch-runs .pytest_cache
