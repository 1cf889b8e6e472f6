"""Automatic steps, losses and time split for scripts that never call mpwatch.report().

The start-up hook every worker loads (mpwatch/worker/boot/sitecustomize.py) puts a finder on
sys.meta_path that waits for `import torch`, and calls `install` right after torch's own
import: a process that never imports torch never loads this package, and a run started with
--no-auto (or MPWATCH_AUTO=0) never puts the finder there. What counts as a step is in
worker.auto.steps, its phases in worker.auto.split (on CUDA, their GPU times in
worker.auto.gpu_times), the loss in worker.auto.loss, where the hooks sit in worker.auto.patches;
the steps go into the worker's own buffer (worker.api.auto_step), so the supervisor sees
reports like any other, and a process that calls report() with a step or a loss itself wins.

Threads: `install` runs on the thread that imported torch; the hooks on the training thread;
a step's loss is read on the sender thread. Stdlib only: torch is the module the script
imported. A DataLoader worker process never sends a step; a child process that trains with
its own optimizer (Hogwild) sends its own, as a child of its rank.
"""
from __future__ import annotations

import os

from mpwatch.worker import api
from mpwatch.worker.auto import patches
from mpwatch.worker.auto.gpu_times import GpuTimes
from mpwatch.worker.auto.loss import Capture, StepLoss
from mpwatch.worker.auto.steps import Steps

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from mpwatch.worker.auto.gpu_times import Pair

_steps: Steps | None = None  # this process's, once installed


def install(torch: ModuleType) -> None:
    """Put the hooks into torch, once per process (a forked child keeps its parent's)."""
    global _steps
    if _steps is not None or not api.active():
        return
    capture = Capture(torch)
    worker_info = torch.utils.data.get_worker_info
    steps: Steps

    def emit(step: int | None, parts: list[object], times: dict[str, float], pairs: list[Pair]) -> None:
        if worker_info() is not None:
            return  # a DataLoader worker process: never a step of its own
        split = steps.split
        for phase, _, _ in pairs:
            times.pop(phase, None)  # the GPU's time, read by the sender, not the CPU's launches
        loss = StepLoss(parts, capture.ring, split.gpu, pairs) if parts or pairs else None
        api.auto_step(step, loss, times)
        if split.gpu is None and capture.ring is not None:
            split.gpu = GpuTimes(torch)  # its losses are on CUDA: its next steps' boundaries too

    steps = Steps(emit)
    patches.install(torch, steps, capture, api.auto_wanted)
    _steps = steps

    def in_child() -> None:
        steps.reset()
        capture.reset()

    os.register_at_fork(after_in_child=in_child)
