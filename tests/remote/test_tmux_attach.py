"""End to end in tmux: `mpwatch attach HOST:RUN HOST:RUN` typed in a shell, through the
test's sshd, on two supervisors "on" 127.0.0.1 and 127.0.0.2: both nodes in the header,
every rank with its node, a pause on node 1 from the keyboard, then a detach that leaves
both runs going and no ssh session or bridge behind; and a viewer SIGKILLed, which leaves
none either."""
from __future__ import annotations

import shutil

import psutil
import pytest

from tests.e2e.test_tmux import BIN, Tmux
from tests.helpers import FIXTURES, alive, wait_for
from tests.remote.sshd import ADDRESSES, REMOTE_MPWATCH

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]
WORKER = FIXTURES / "tui_worker.py"


def bridges(sshd) -> list[int]:
    """The mpwatch bridges this test's sshd started (the other lanes' tests have their own)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "bridge" in cmd and "mpwatch" in " ".join(cmd):
            try:
                if any(a.pid == sshd.proc.pid for a in p.parents()):
                    out.append(p.pid)
            except psutil.Error:
                continue  # ended meanwhile
    return out


def test_attach_two_hosts_in_a_terminal(headless, sshd, tmp_path):
    runs = [headless(WORKER, n=n, env=sshd.node_env(addr)) for n, addr in zip((2, 2), ADDRESSES, strict=True)]
    ids = [run.status()["run"]["id"] for run in runs]
    tmux = Tmux(tmp_path, size=(120, 36), env={"MPWATCH_SSH": f"ssh -F {sshd.client_config}"})
    tmux.start()
    try:
        targets = " ".join(f"{a}:{i}" for a, i in zip(ADDRESSES, ids, strict=True))
        tmux.type(f"{BIN} attach --remote-mpwatch '{REMOTE_MPWATCH}' {targets}; echo ATTACH-EXIT=$?")
        s = tmux.wait_screen(lambda s: "node 0 127.0.0.1" in s and "node 1 127.0.0.2" in s
                             and s.count("● running") >= 4, "both nodes and four running ranks")
        assert "NODE" in s and "RANK" in s and "4 workers" in s
        rows = [ln.split() for ln in s.splitlines() if "● running" in ln]
        assert [(r[0].strip("▸▾ "), r[1]) for r in rows[:4]] == [("0", "0"), ("1", "0"), ("2", "1"), ("3", "1")]
        for _ in range(3):  # rank 3: node 1's rank 1
            tmux.key("j")
        tmux.key("p")
        tmux.wait_screen(lambda s: "node 1: paused rank 1" in s and "‖ paused" in s, "rank 3 paused")
        runs[1].wait_event("paused", lambda r: r["rank"] == 1)
        assert not runs[0].events("paused")
        tmux.key("q")
        tmux.wait_screen(lambda s: "Detach" in s, "the quit dialog")
        tmux.key("d")
        tmux.wait_screen(lambda s: "ATTACH-EXIT=0" in s, "attach to exit after detaching")
        assert "detached; the run goes on on every node" in tmux.screen()
        assert all(run.proc.poll() is None for run in runs)
        wait_for(lambda: not bridges(sshd), 20, what="every bridge to end with its session")
        # a viewer killed outright (SIGKILL: nothing of it runs again) leaves no ssh and no bridge
        tmux.type(f"{BIN} attach --remote-mpwatch '{REMOTE_MPWATCH}' {targets}")
        tmux.wait_screen(lambda s: "node 1 127.0.0.2" in s and s.count("● running") >= 3, "attached again")
        viewer = next(p for p in psutil.process_iter(["cmdline"])
                      if "attach" in (p.info["cmdline"] or []) and targets.split()[0] in (p.info["cmdline"] or []))
        sessions = [c.pid for c in viewer.children() if "ssh" in c.name()]
        assert len(sessions) == 2 and len(bridges(sshd)) == 2
        viewer.kill()
        wait_for(lambda: not bridges(sshd) and not [p for p in sessions if alive(p)], 30,
                 what="the viewer's ssh clients and their bridges to end")
        assert all(run.proc.poll() is None for run in runs)
    finally:
        tmux.kill()
