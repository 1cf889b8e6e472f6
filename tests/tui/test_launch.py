"""The CLI's way into the TUI: the detached supervisor's command line, and bad input."""
from __future__ import annotations

import os
from pathlib import Path

from mpwatch import cli
from mpwatch.cli.tui_launch import supervisor_argv
from mpwatch.rundir.claim import Claim
from mpwatch.settings import Settings
from mpwatch.supervisor.core import Options
from tests.helpers import FIXTURES, mpwatch


def test_supervisor_gets_the_same_options(tmp_path):
    ns = cli.run_parser().parse_args(["-n", "3", "--max-restarts", "2", "--stall-timeout", "7.5", "--grace", "0",
                                      "--startup-timeout", "90", "--resize-mode", "independent",
                                      "--gpu-interval", "2", "train.py", "--lr", "0.1"])
    opts = Options(script=ns.script, args=list(ns.args), nprocs=ns.nprocs, max_restarts=ns.max_restarts,
                   stall_timeout=ns.stall_timeout, startup_timeout=ns.startup_timeout, grace=ns.grace,
                   resize_mode=ns.resize_mode, gpu_interval=ns.gpu_interval)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        argv = supervisor_argv(ns, opts, Claim("RID", Path("/tmp/rd"), fd, Settings().tmpdir))
    finally:
        os.close(fd)
    assert argv[1:3] == ["-m", "mpwatch"]
    back = cli.run_parser().parse_args(argv[3:])
    assert back.supervise_only and back.headless and back.run_id == "RID" and back.run_dir == "/tmp/rd"
    st = tmp_path.stat()
    assert back.made_run_dir == (st.st_dev, st.st_ino)  # the supervisor checks it is the directory made here
    assert (back.nprocs, back.max_restarts, back.stall_timeout, back.startup_timeout, back.grace, back.resize_mode,
            back.gpu_interval) == (3, 2, 7.5, 90.0, 0.0, "independent", 2.0)
    assert back.script == "train.py" and back.args == ["--lr", "0.1"]


def test_unusable_run_dir_is_one_line_and_exit_2(tmp_path):
    res = mpwatch("-n", "1", "--run-dir", "/proc/mpwatch-no-such-dir", FIXTURES / "tui_worker.py", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("mpwatch: error: cannot create run directory /proc/mpwatch-no-such-dir")
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
