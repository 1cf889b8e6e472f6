"""The GPU seam, the supervisor's side: the one place where the product lets a double answer in
NVML's place, where there is no GPU (tests, CI, the benches, the recorders).

A switch names a scenario file: MPWATCH_SCRIPTED_NVML=scenario.json (settings.Settings.scripted_nvml,
docs/settings.md). `scenario()` reads it from the settings; `backend()` imports the module that serves
the seam (SERVES, by name at run time: the product never imports mpwatch.testing) and returns what its
`serve(scenario)` makes, a backend answering probes.gpu_backend.Backend as a current driver does.
probes.gpu.open_backend opens it as it opens the real one, so everything past the backend is the code
that runs on a GPU. The worker side's seam (its CUDA view, torch's CUDA calls) is worker.seam.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpwatch.probes.gpu_backend import Backend
    from mpwatch.settings import Settings

SERVES = "mpwatch.testing.nvml"  # the double serving the seam: serve(scenario) -> Backend


def scenario(settings: Settings) -> str | None:
    """The scenario the command was given; None: the real NVML."""
    return settings.scripted_nvml


def backend(scenario: str) -> Backend:
    """The double playing `scenario`, not started yet; GpuUnavailable (its one line) when the file
    cannot be read."""
    served: Backend = importlib.import_module(SERVES).serve(scenario)
    return served
