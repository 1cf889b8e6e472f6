"""End to end in tmux: `mpwatch -n 2` on a fixture script, read the screen with
capture-pane, pause a worker with `p`, detach with `q`, `mpwatch attach`, stop the run,
and check that no process of the run is left."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import FIXTURES, alive, assert_gone, wait_for

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

BIN = Path(sys.executable).parent / "mpwatch"


class Tmux:
    def __init__(self, cwd: Path):
        self.sock = f"mpwatch-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.cwd = cwd

    def __call__(self, *args, check=True) -> str:
        res = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=30)
        if check:
            assert res.returncode == 0, f"tmux {args}: {res.stderr}"
        return res.stdout

    def start(self):
        self("-f", "/dev/null", "new-session", "-d", "-x", "120", "-y", "40", "-s", "e2e", "-c", str(self.cwd),
             "env", "-i", f"PATH={os.environ['PATH']}", f"HOME={os.environ.get('HOME', '/tmp')}",
             "LANG=C.UTF-8", "TERM=xterm-256color", "PS1=$ ", "bash", "--norc", "--noprofile")

    def type(self, line: str):
        self("send-keys", "-t", "e2e", line, "Enter")

    def key(self, key: str):
        self("send-keys", "-t", "e2e", key)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "e2e")

    def wait_screen(self, pred, what: str, timeout: float = 60.0) -> str:
        try:
            return wait_for(lambda: (lambda s: s if pred(s) else None)(self.screen()), timeout, interval=0.2,
                            what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen was:\n{self.screen()}") from None

    def kill(self):
        self("kill-server", check=False)
        # kill-server leaves the socket file behind
        sock = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / self.sock
        sock.unlink(missing_ok=True)


def run_pids(run_dir: Path) -> set[int]:
    pids = set()
    try:
        info = json.loads((run_dir / "run.json").read_text())
        pids.add(int(info["pid"]))
    except (OSError, ValueError, KeyError):
        pass
    try:
        for line in (run_dir / "events.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec.get("event") == "worker_started":
                pids.add(rec["pid"])
    except (OSError, ValueError):
        pass
    for pid in list(pids):
        try:
            pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
    return pids


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    t.start()
    yield t
    t.kill()
    pids = run_pids(tmp_path / "run")
    for pid in pids:  # whatever the test left: never leak a process
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_run_pause_detach_attach_stop(tmux, tmp_path):
    run_dir = tmp_path / "run"
    script = FIXTURES / "tui_worker.py"
    tmux.type(f"{BIN} -n 2 --grace 2 --run-dir {run_dir} {script}; echo MPWATCH-EXIT=$?")
    tmux.wait_screen(lambda s: "2 running" in s and s.count("● running") >= 2, "two running workers")
    screen = tmux.screen()
    assert "tui_worker.py" in screen and "RANK" in screen and "LOSS" in screen

    # The supervisor is its own session: the TUI is only a client.
    sup = json.loads((run_dir / "run.json").read_text())["pid"]
    assert os.getsid(sup) == sup

    tmux.key("p")  # rank 0 is selected first
    tmux.wait_screen(lambda s: "‖ paused" in s and "1 paused" in s, "rank 0 paused on screen")
    wait_for(lambda: any(json.loads(ln).get("event") == "paused"  # events.jsonl is flushed twice a second
                         for ln in (run_dir / "events.jsonl").read_text().splitlines()),
             30, what="the paused event in events.jsonl")

    tmux.key("q")
    tmux.wait_screen(lambda s: "Leave run" in s and "Detach" in s, "the quit dialog")
    tmux.key("d")
    tmux.wait_screen(lambda s: "MPWATCH-EXIT=0" in s, "mpwatch to exit after detaching")
    assert "detached from run" in tmux.screen()
    pids = run_pids(run_dir)
    assert len(pids) >= 3 and all(alive(p) for p in pids), "the run goes on after a detach"

    tmux.type(f"{BIN} attach {run_dir}; echo ATTACH-EXIT=$?")
    tmux.wait_screen(lambda s: "‖ paused" in s and "1 running" in s, "the attached TUI showing the run")
    tmux.key("q")
    tmux.wait_screen(lambda s: "Stop the run" in s, "the quit dialog")
    tmux.key("s")
    tmux.wait_screen(lambda s: "ATTACH-EXIT=1" in s, "mpwatch attach to exit after stopping", timeout=90)
    info = json.loads((run_dir / "run.json").read_text())
    assert info.get("finished") and info.get("exit_code") == 1
    assert_gone(pids | run_pids(run_dir))
