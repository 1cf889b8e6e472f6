"""The TUI's own priority (issue 43): a TUI in a terminal runs its threads, and its session's
scheduling group, at tui.priority.NICE where the system lets it, and gives the group back as
it was when it leaves (the shell it ran in keeps its own priority); the run's processes keep
theirs. Where raising is not allowed the TUI runs as it was started (the case is skipped)."""
from __future__ import annotations

import os

import pytest

from mpwatch.tui import priority
from tests.faults.conftest import FAULTS, reporting
from tests.faults.test_tui_killed import Tmux, attach_cmd
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)


def _nice(pid: int, tid: int) -> int:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19: nice


def _group(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return int(f.read().split("nice")[1])
    except (OSError, ValueError, IndexError):
        return None


def test_the_tui_runs_ahead_of_the_run_and_gives_its_session_back(headless, tmp_path):
    try:
        os.setpriority(os.PRIO_PROCESS, os.getpid(), os.getpriority(os.PRIO_PROCESS, os.getpid()))
        allowed = os.getuid() == 0
    except OSError:
        allowed = False
    if not allowed:
        pytest.skip("raising a priority needs root or an RLIMIT_NICE that allows it")
    run = headless(FAULTS / "steady.py", n=2)
    st = wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    tmux = Tmux()
    try:
        group = tmp_path / "group"  # the session's group as the shell had it before the TUI started
        tmux("new-session", "-d", "-x", "160", "-y", "45", "-s", "p",
             f"sh -c 'cat /proc/self/autogroup > {group} 2>/dev/null; {attach_cmd(run.run_dir)}; sleep 60'")
        tmux.wait_screen("p", lambda s: "2 running" in s, "the TUI")
        shell = tmux.pane_procs("p")[0]
        said = group.read_text()
        before = int(said.split("nice")[1]) if "nice" in said else None
        tui = next(p for p in tmux.pane_procs("p") if "attach" in p.cmdline()[1:] and p is not shell)
        nices = wait_for(lambda: (lambda n: n if all(x == priority.NICE for x in n) else None)(
            [_nice(tui.pid, int(t)) for t in os.listdir(f"/proc/{tui.pid}/task")]),
            what="every TUI thread raised")
        assert len(nices) >= 2  # the event loop and the poller at least
        if before is not None:  # the kernel groups by session: the TUI's group is raised while it runs
            assert _group(tui.pid) == priority.NICE
        assert all(os.getpriority(os.PRIO_PROCESS, w["pid"]) == 0 for w in st["workers"])
        tmux("send-keys", "-t", "p", "q")
        tmux("send-keys", "-t", "p", "d")  # detach: the run goes on
        wait_for(lambda: not tui.is_running(), what="the TUI to leave")
        if before is not None:
            assert _group(shell.pid) == before
    finally:
        tmux("kill-server", check=False)
