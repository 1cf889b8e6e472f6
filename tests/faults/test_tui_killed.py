"""The TUI killed while attached (SIGKILL, then a hang-up as when an SSH session drops): the run
goes on, and attaching again shows everything (issue 8). End to end in tmux."""
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from mpwatch.sources.local import Client
from tests.faults.conftest import FAULTS, reporting
from tests.helpers import alive, assert_gone, wait_for

pytestmark = [
    pytest.mark.timeout(240), pytest.mark.slow, pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

BIN = Path(sys.executable).parent / "mpwatch"


class Tmux:
    def __init__(self):
        self.sock = f"mpwatch-faults-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args, check=True) -> str:
        res = subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args], capture_output=True, text=True,
                             timeout=30)
        assert not check or res.returncode == 0, f"tmux {args}: {res.stderr}"
        return res.stdout

    def screen(self, target: str) -> str:
        return self("capture-pane", "-p", "-t", target)

    def wait_screen(self, target, pred, what):
        try:
            return wait_for(lambda: (lambda s: s if pred(s) else None)(self.screen(target)), 90, interval=0.2,
                            what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen was:\n{self.screen(target)}") from None

    def pane_procs(self, target) -> list[psutil.Process]:
        pid = int(self("list-panes", "-t", target, "-F", "#{pane_pid}").split()[0])
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]


def attach_cmd(run_dir) -> str:
    return f"TERM=xterm-256color LANG=C.UTF-8 {BIN} attach {run_dir}"


def test_tui_killed_while_attached_leaves_the_run_going(headless):
    run = headless(FAULTS / "steady.py", n=2)
    st = wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    pids = [str(w["pid"]) for w in st["workers"]]
    tmux = Tmux()

    def showing(screen):  # both rows running, and the selected rank's pid in the detail line
        return "2 running" in screen and f"pid {pids[0]}" in screen
    try:
        tmux("new-session", "-d", "-x", "160", "-y", "45", "-s", "one", attach_cmd(run.run_dir))
        tmux.wait_screen("one", showing, "the TUI to show both workers")
        tui = [p for p in tmux.pane_procs("one") if "attach" in " ".join(p.cmdline())]
        assert tui, "no TUI process found in the pane"
        for p in tui:
            p.send_signal(signal.SIGKILL)
        assert_gone([p.pid for p in tui])
        # the run did not notice
        steps = {w["rank"]: w["step"] for w in run.status()["workers"]}
        after = wait_for(lambda: (lambda s: s if all(w["step"] >= steps[w["rank"]] + 20 for w in s["workers"])
                                  else None)(run.status()), what="20 more steps after the TUI died")
        assert [str(w["pid"]) for w in after["workers"]] == pids
        assert all(w["state"] == "running" for w in after["workers"]) and not run.events("stopping")
        # attach again: the whole run is there, from its first event
        tmux("new-session", "-d", "-x", "160", "-y", "45", "-s", "two", attach_cmd(run.run_dir))
        tmux.wait_screen("two", showing, "the second TUI to show both workers")
        tmux("send-keys", "-t", "two", "e")  # the TUI itself shows them: its events screen
        tmux.wait_screen("two", lambda s: "run started" in s and all(f"rank {r} started (pid {p})" in s
                                                                   for r, p in enumerate(pids)),
                         "the events screen, from the first event")
        tmux("send-keys", "-t", "two", "Escape")
        with Client.at(run.run_dir) as c:
            evs = c.events(0)["events"]
            assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
            assert evs[0]["event"] == "run_started"
            assert sorted(e["rank"] for e in evs if e["event"] == "worker_started") == [0, 1]
            assert len(c.history(0)) >= steps[0]
        # a hang-up (the SSH session ends): the TUI goes, the run stays
        tui2 = [p.pid for p in tmux.pane_procs("two") if "attach" in " ".join(p.cmdline())]
        tmux("kill-server", check=False)
        assert_gone(tui2)
        s1 = run.status()["workers"][0]["step"]
        wait_for(lambda: run.status()["workers"][0]["step"] >= s1 + 10, what="steps after the hang-up")
        assert run.proc.poll() is None
    finally:
        tmux("kill-server", check=False)
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone()
    assert not [p for p in map(int, pids) if alive(p)]
