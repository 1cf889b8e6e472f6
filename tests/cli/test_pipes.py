"""Every command's output into a pipe whose reader has gone (`mpwatch ... | head`) ends
quietly: no BrokenPipeError traceback, the exit code of a process ended by SIGPIPE (141)."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import FIXTURES, MPWATCH, wait_for

pytestmark = pytest.mark.timeout(200)


def into_closed_pipe(*args) -> subprocess.CompletedProcess:
    """The command with stdout on a pipe whose read end is closed before it writes a byte."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([*MPWATCH, *map(str, args)], stdout=w, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)


def test_every_command_into_a_closed_pipe_ends_quietly(crashed, headless):
    live = headless(FIXTURES / "forever.py", n=1)
    wait_for(lambda: live.worker(0)["step"], what="rank 0 reporting")
    for args in (["ls"], ["ls", "--json"], ["ls", "--all", crashed.folder], ["summary", crashed.dir],
                 ["summary", "--json", crashed.dir], ["ctl", "--run", live.run_dir, "status"],
                 ["ctl", "--run", live.run_dir, "status", "--json"], ["ctl", "--run", crashed.dir, "logs", "0"],
                 ["prune", "--keep", "1000", "--dry-run", crashed.folder]):
        res = into_closed_pipe(*args)
        assert (res.returncode, res.stderr) == (141, ""), (args, res.stderr)
    res = into_closed_pipe("--help")  # argparse writes --help itself; it too stays quiet
    assert res.stderr == "" and res.returncode in (0, 141)


def test_ctl_status_into_head(headless):
    live = headless(FIXTURES / "forever.py", n=3)
    wait_for(lambda: all(w["step"] for w in live.status()["workers"]), what="3 ranks reporting")
    cmd = " ".join(MPWATCH) + f" ctl --run {live.run_dir} status | head -1; exit ${{PIPESTATUS[0]}}"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert res.stdout.startswith("run ") and res.stdout.count("\n") == 1
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr
    assert res.returncode in (0, 141)  # 0 when head read it all before closing
