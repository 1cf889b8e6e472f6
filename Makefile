# Fresh machine: `make demo` sets up .venv and runs the demo; `make test` sets up and runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv compiled tests-compiled demo test lint bench clean

# pip byte-compiles what it installs (torch's 2,352 modules, transformers, Textual...). Leave it so:
# where PYTHONDONTWRITEBYTECODE=1 (many images, and CI), Python never caches a compiled module on
# import, and every worker, supervisor and test process would compile torch from source at each
# start (import torch: 3.9 CPU-s without the cache, 2.0 with it). Measured on 2 cores: the install
# costs 87 CPU-s compiled against 55 without (BENCHMARKS.md; `python -m bench --only install`).
# Where this machine has no NVIDIA GPU (CI) and PyTorch's CPU index answers, torch and torchvision
# come from it: torch's CPU build is a 190 MB wheel, where PyPI's is 900 MB plus 3.2 GB of CUDA
# libraries (nvidia-*, triton) that nothing here loads (a venv of 1.1 GB, not 5.9). TORCH_INDEX=
# (empty) keeps PyPI's build; an index that does not answer in 5 s is not asked.
TORCH_INDEX ?= $(if $(wildcard /dev/nvidiactl),,https://download.pytorch.org/whl/cpu)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q $(shell $(PY) -c "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=5); \
		print('--extra-index-url', sys.argv[1])" "$(TORCH_INDEX)" 2>/dev/null) -e '.[demo,test,spy]'
	touch $(STAMP)

# mpwatch's own modules and the tests' (an editable install is not compiled by pip): compileall
# writes whatever the environment says, and only what changed since the last run (half a second).
compiled: $(STAMP)
	$(BIN)/python -m compileall -q -x 'fixtures/syntax_error' mpwatch tests bench demo >/dev/null

venv: $(STAMP)

demo: compiled
	$(BIN)/mpwatch demo/mnist.py

# Static checks first (seconds): a renderer reading a status key the schema lacks fails here.
lint: compiled
	$(BIN)/ruff check mpwatch
	$(BIN)/mypy

# Six lanes (pytest-xdist) on two cores: the tests wait on real processes more than they compute.
# In four lanes the two cores idled 17% of the suite (205 of 1,190 CPU-s, 2026-12-06: every lane
# waiting on a run's clock at once); in six, 4% (41 of 1,024), and the same tests took 510-523 s
# against 585-598 s in four, the CPU the same (980-1,000 CPU-s). docs/contributing.md says where it
# goes. Each run recorded once per session stays in one lane (its xdist group); LANES=0: no lanes, one
# process.
LANES ?= 6
test: lint tests-compiled
	$(BIN)/python -m tests.ci -q -rs -n $(LANES) --dist loadgroup

# pytest loads each test module with its assertions rewritten, and caches that beside compileall's
# bytecode only where bytecode writing is on: one collection with it on (10 s) saves each lane the
# rewriting of every module (3.4 CPU-s a lane, 14 in four; they read it unless a module changed since).
# A module that fails to collect fails the run that follows, which says why.
tests-compiled: compiled
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider >/dev/null 2>&1 || true

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) mpwatch-runs .pytest_cache
