"""What a run was asked to do: the command line's options, as the supervisor takes them."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Options:
    script: str
    args: list[str]
    nprocs: int
    run_dir: Path | str | None = None
    max_restarts: int = 0
    stall_timeout: float = 60.0
    grace: float = 10.0
    resize_mode: str = "restart"  # restart | independent
    gpu_interval: float = 1.0
    run_id: str | None = None  # given by a launcher that chose the run directory itself
    cwd: str = field(default_factory=os.getcwd)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
