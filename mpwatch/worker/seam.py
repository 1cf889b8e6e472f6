"""The GPU seam, the worker's side: the one place where a training process lets a double answer
in its GPU's place, where there is none (tests, CI, the benches, the recorders).

A switch names a scenario file: MPWATCH_SCRIPTED_CUDA=scenario.json (docs/settings.md; the worker
reads it itself, as it reads contract.protocol's names). `cuda(rank)` imports the module that serves
the seam (SERVES, by name at run time: the product never imports mpwatch.testing) and returns what
its `serve(scenario, rank)` makes for the rank: the CUDA view the sender reports (in place of
worker.cuda's TorchCuda) and the torch whose CUDA calls the memory forensics are armed on
(worker.cuda_memory), each answering as torch's own. None when the switch is unset: torch's own.
The supervisor's side of the seam (NVML) is probes.seam. Standard library only; nothing more is
imported unless the switch is set.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # no `typing` at run time on the worker side: it costs milliseconds
if TYPE_CHECKING:
    from typing import Any

    from mpwatch.worker.channel import CudaSource

SCRIPTED_CUDA_ENV = "MPWATCH_SCRIPTED_CUDA"
SERVES = "mpwatch.testing.cuda"  # the double serving the seam: serve(scenario, rank) -> (view, torch)


def cuda(rank: int) -> tuple[CudaSource, Any] | None:
    """(the CUDA view, the torch) the scenario plays for `rank`, or None: torch's own."""
    scenario = os.environ.get(SCRIPTED_CUDA_ENV)
    if not scenario:
        return None
    import importlib

    served: tuple[CudaSource, Any] = importlib.import_module(SERVES).serve(scenario, rank)
    return served
