"""`mpwatch [options] SCRIPT [ARGS...]`: check the command line, then run the supervisor
here (headless) or hand over to the TUI's launcher. Runs on the main thread."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from mpwatch.cli.args import UsageError, die

if TYPE_CHECKING:
    from mpwatch.supervisor.core import Options

Launcher = Callable[[argparse.Namespace, "Options"], int]


def default_nprocs() -> int:
    """Visible NVIDIA GPUs (CUDA_VISIBLE_DEVICES, else NVML), or 2 without any."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        ids = [x for x in vis.split(",") if x.strip() and x.strip() != "-1"]
        return len(ids) or 2
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount()) or 2
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no library, a broken one: the CPU default
        return 2


def check_script(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"script not found: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a script")
    if not os.access(path, os.R_OK):
        raise UsageError(f"script is not readable: {path}")


def cmd_run(ns: argparse.Namespace) -> int:
    check_script(ns.script)
    if ns.run_dir is not None and os.path.exists(ns.run_dir) and not os.path.isdir(ns.run_dir):
        raise UsageError(f"--run-dir {ns.run_dir} exists and is not a directory")
    from mpwatch import registry
    from mpwatch.supervisor.core import Options, Run
    from mpwatch.supervisor.headless import Reporter

    opts = Options(script=ns.script, args=list(ns.args), nprocs=ns.nprocs or default_nprocs(),
                   run_dir=ns.run_dir, max_restarts=ns.max_restarts, stall_timeout=ns.stall_timeout,
                   grace=ns.grace, resize_mode=ns.resize_mode, gpu_interval=ns.gpu_interval,
                   run_id=ns.run_id)
    if not ns.headless and not ns.supervise_only:
        tui = _tui_launcher()
        if tui is not None:
            return tui(ns, opts)
    try:
        run = Run(opts, status_out=Reporter())
        run.setup()  # every RunError comes before it holds anything (the supervisor branch: it releases)
    except registry.RunError as exc:
        return die(str(exc))
    code: int = run.serve()
    return code


def _tui_launcher() -> Launcher | None:
    """The TUI's launcher when the TUI is installed, else None (headless then)."""
    try:
        from mpwatch.tui.launch import launch_with_tui
    except ImportError:
        return None
    launch: Launcher = launch_with_tui
    return launch
