"""A CUDA memory snapshot of this process on demand (`mpwatch ctl memory`, the TUI's `M`):
torch.cuda.memory._snapshot() at a step boundary, pickled where the supervisor said
(rank-N/memory/, by rundir.rank_files: the writer of a rank's files), as pytorch.org/memory_viz
opens it; with --cuda-memory-history its blocks carry the stacks that allocated them.

Runs on the training thread at the step boundary (worker.actions: report() with a step, or the
automatic steps), through the process's CUDA memory forensics (worker.cuda_memory: torch's own,
or the GPU seam's, worker.seam); the snapshot is taken and written there, once, and the loop waits that
long (`held_ms`). A process that has not imported torch, or has not initialised CUDA, answers
why not. Stdlib only; loaded by worker.actions when a snapshot is asked.
"""
from __future__ import annotations

import os
import sys
import time

from mpwatch.worker import cuda_memory

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mpwatch.worker.actions import Answers

NO_TORCH = "this process has not imported torch: there is no CUDA allocator to snapshot"
NO_CUDA = "this process has not initialised CUDA: there is no CUDA allocator to snapshot"
NOT_ARMED = "this process's CUDA memory forensics are not armed (its start-up hook did not run)"


def begin(answers: Answers, rid: int, at: int | None, step: int, frame: dict[str, object]) -> None:
    """Training thread: the snapshot, now (the boundary at `step`); its outcome answered. Never
    a session: it is over when this returns."""
    path = frame.get("path")
    if type(path) is not str or not os.path.isabs(path):
        answers.result(rid, {"state": "failed", "why": "a memory snapshot request of the wrong shape"})
        return None
    f = cuda_memory.armed()
    if f is None or not f.cuda:
        why = NO_CUDA if f is not None else NOT_ARMED if "torch" in sys.modules else NO_TORCH
        answers.result(rid, {"state": "failed", "why": why})
        return None
    answers.answer(rid, at, step)
    t0 = time.perf_counter()
    written, size, error = f.write_to(path)
    held_ms = round((time.perf_counter() - t0) * 1000, 1)
    if written is None:
        answers.result(rid, {"state": "failed", "why": error or "not written", "held_ms": held_ms})
        return None
    note = None if f.recording else "no allocation history (--cuda-memory-history): blocks without stacks"
    answers.result(rid, {"state": "written", "bytes": size, "held_ms": held_ms, "why": note})
    return None
