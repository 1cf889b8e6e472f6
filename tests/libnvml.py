"""The stand-in libnvidia-ml.so.1 (mpwatch.testing.libnvml) for tests: the session fixture
that builds it (skipping, with the reason, where there is no gcc or no nvml.h), the environment
that makes a supervisor load it through nvidia-ml-py's own loader, and, for tests in this
process, loading it into pynvml by path (a process's LD_LIBRARY_PATH is read once, at its start).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pynvml
import pytest

from mpwatch.testing.libnvml import SCRIPT_ENV, build
from mpwatch.testing.libnvml.script import env_for, write_script


@pytest.fixture(scope="session")
def libnvml(tmp_path_factory) -> Path:
    """The folder of a built stand-in libnvidia-ml.so.1 (a current driver's)."""
    return _built(tmp_path_factory, "full")


@pytest.fixture(scope="session")
def libnvml_no_v3(tmp_path_factory) -> Path:
    """The same library as a driver older than R510 has it: no _v3 process list."""
    return _built(tmp_path_factory, "no_v3")


def _built(factory, variant: str) -> Path:
    why = build.missing()
    if why:
        pytest.skip(why)
    return build.build(factory.getbasetemp() / "libnvml", variant)


def nvml_env(lib_dir: Path, tmp_path: Path, scenario: object, base: Mapping[str, str] | None = None,
             name: str = "nvml-script.txt") -> dict[str, str]:
    """An environment (base, else this one) whose processes play `scenario` (data or a JSON
    file's path) on the stand-in library."""
    script = write_script(scenario, tmp_path / name)
    return env_for(lib_dir, script, os.environ if base is None else base)


def nvml_overlay(lib_dir: Path, tmp_path: Path, scenario: object) -> dict[str, str]:
    """Only the variables nvml_env sets: for fixtures that lay their env over os.environ."""
    full = nvml_env(lib_dir, tmp_path, scenario, base={})
    return {k: full[k] for k in ("LD_LIBRARY_PATH", SCRIPT_ENV)}


@contextlib.contextmanager
def loaded(lib_dir: Path, monkeypatch, tmp_path: Path, scenario: object) -> Iterator[None]:
    """This process's pynvml bound to the stand-in at lib_dir, playing `scenario`, until the
    block ends (then pynvml is as it was: no library loaded)."""
    script = write_script(scenario, tmp_path / "nvml-script.txt")
    monkeypatch.setenv(SCRIPT_ENV, str(script))  # read by the library at nvmlInit
    saved = pynvml.nvmlLib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    lib = pynvml.nvmlLib = ctypes.CDLL(str(lib_dir / build.LIB_NAME))
    try:
        yield
    finally:
        while lib.nvmlShutdown() == 0:  # NVML counts inits: a test that did not shut down ends here
            pass
        pynvml.nvmlLib = saved
        pynvml._nvmlGetFunctionPointer_cache.clear()
