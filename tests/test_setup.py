"""What `make venv` leaves behind, and what mpwatch leaves of the environment for its workers.

Where PYTHONDONTWRITEBYTECODE=1 (CI, many container images) Python never caches what it compiles,
so an install without bytecode makes every torch process compile torch from source at each start
(seconds of CPU per worker). The install must leave the packages compiled, and mpwatch must never
turn bytecode writing off for the scripts it starts.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tests.helpers import HeadlessRun

# Modules every kind of mpwatch process imports: a worker (torch), the TUI (textual), the supervisor
# (psutil), the frameworks the tests run (lightning, transformers).
COMPILED = ("torch", "torch.nn.modules.linear", "torch.distributed.distributed_c10d", "textual.app",
            "psutil", "lightning.pytorch.trainer.trainer", "transformers.trainer")


@pytest.mark.parametrize("name", COMPILED)
def test_the_installed_packages_are_compiled(name):
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} is not installed"
    cached = Path(importlib.util.cache_from_source(spec.origin))
    assert cached.is_file(), (f"{name}: no bytecode at {cached}: with PYTHONDONTWRITEBYTECODE=1 every "
                              "process compiles it again (make venv must let pip byte-compile)")


WHERE = """
import sys
print("dont_write_bytecode", int(sys.dont_write_bytecode), flush=True)
"""


def test_workers_keep_the_environment_s_bytecode_setting(tmp_path):
    script = tmp_path / "flags.py"
    script.write_text(WHERE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = HeadlessRun(tmp_path, script, n=1, env=env).start()
    try:
        assert run.wait_exit() == 0, run.stderr_text
        assert "dont_write_bytecode 0" in run.log(0), run.log(0)
    finally:
        run.cleanup()



@pytest.mark.skipif("MAKELEVEL" not in os.environ, reason="`make test` compiles the tests first; a bare pytest may not")
def test_make_test_loads_the_tests_as_pytest_rewrote_them_once():
    """Where bytecode writing is off, pytest rewrites every test module's assertions in each lane
    at each run unless `make tests-compiled` cached them (3.4 CPU-s a lane)."""
    here = Path(__file__)
    pyc = here.parent / "__pycache__" / f"{here.stem}.{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
    assert pyc.is_file(), f"no {pyc}: make tests-compiled did not cache the rewritten tests"
