"""What a run writes about itself, besides events and the status: run.json at the start, its
entry in the live-run registry (rundir.registry), and how each rank ended (run_finished). Pure;
the main thread calls them."""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mpwatch.rundir import registry
from mpwatch.supervisor.options import Options
from mpwatch.supervisor.workers.worker import Worker


def run_json(o: Options, run_id: str, run_dir: Path, started: float) -> dict[str, Any]:
    """run.json as written at the start (finished and exit_code are added at the end)."""
    return {"run_id": run_id, "script": o.script, "args": o.args, "argv": o.argv, "cwd": o.cwd,
            "started": started, "pid": os.getpid(),
            "options": {"nprocs": o.nprocs, "max_restarts": o.max_restarts, "stall_timeout": o.stall_timeout,
                        "startup_timeout": o.startup_timeout,
                        "grace": o.grace, "resize_mode": o.resize_mode, "gpu_interval": o.gpu_interval,
                        "stop_signal": o.stop_signal, "run_dir": str(run_dir)}}


def registry_entry(o: Options, run_id: str, run_dir: Path, started: float) -> registry.RegistryEntry:
    """How `mpwatch ls` and RUN resolution find the live run."""
    return {"run_id": run_id, "run_dir": str(run_dir.resolve()), "pid": os.getpid(),
            "script": o.script, "started": started, "nprocs": o.nprocs}


def ends(workers: Iterable[Worker]) -> dict[str, dict[str, Any]]:
    """How each rank ended, for run_finished."""
    return {str(w.rank): {"state": w.state.value, "exit_code": w.attempt.exit_code,
                          "signal": w.attempt.signal, "cause": w.attempt.cause} for w in workers}
