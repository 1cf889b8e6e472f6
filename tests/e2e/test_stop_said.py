"""`q` then stop says how the run ended (issue 31): the TUI closed silently; now it prints the
run, how it ended and the command that tells each rank's end (as a detach prints a line).
On the way, the footer of a real run shows c and t. End to end in tmux, `mpwatch -n 2` on a
fixture script, at 80x24 and 160x48."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal

import pytest

from tests.e2e.test_tmux import BIN, Tmux, run_pids
from tests.helpers import FIXTURES, assert_gone, mpwatch

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]
SIZES = [(80, 24), (160, 48)]


@pytest.fixture(params=SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def tmux(request, tmp_path):
    t = Tmux(tmp_path, size=request.param)
    t.start()
    yield t
    t.kill()
    for run_dir in (tmp_path / "mpwatch-runs").glob("*"):  # whatever the test left: never leak a process
        for pid in run_pids(run_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_q_then_stop_prints_the_run_how_it_ended_and_the_summary_command(tmux, tmp_path):
    script = FIXTURES / "tui_worker.py"
    tmux.type(f"{BIN} -n 2 --grace 2 {script}; echo MPWATCH-EXIT=$?")
    tmux.wait_screen(lambda s: s.count("● running") >= 2, "two running workers")
    # the footer has c and t at 80 columns too, ? and q first (issue 31)
    tmux.wait_screen(lambda s: "? Help q Quit" in s and "c Checkpoint t Tunables" in s, "the footer")
    (run_dir,) = (tmp_path / "mpwatch-runs").iterdir()
    pids = run_pids(run_dir)
    tmux.key("q")
    tmux.wait_screen(lambda s: "Stop the run" in s, "the quit dialog")
    tmux.key("s")
    screen = tmux.wait_screen(lambda s: "MPWATCH-EXIT=1" in s, "mpwatch to exit after stopping", timeout=90)
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    said = tmux("capture-pane", "-p", "-J", "-t", "e2e")  # lines wrapped at 80 columns, joined
    ended = f"mpwatch: run {run_id} ended: stopped (asked with ctl stop or the TUI), exit code 1"
    assert ended in said, screen
    assert f"mpwatch: how each rank ended: mpwatch summary {run_id}" in said, screen
    assert_gone(pids)
    # and the command it names works from here: each rank's end
    res = mpwatch("summary", run_id, cwd=tmp_path)
    assert res.returncode == 0 and re.search(r"^\s+0\s+killed", res.stdout, re.M), res.stdout
