"""End to end in tmux: `mpwatch -n 2` on a fixture script, read the screen with
capture-pane, pause a worker with `p`, detach with `q`, `mpwatch attach`, stop the run,
and check that no process of the run is left. And the GPUs at 80x24 and 160x48 with the
issue's scripted NVML: both GPUs, their utilization and each rank's GPU memory on screen."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mpwatch.rundir.textfiles import read_jsonl
from tests.helpers import FIXTURES, alive, assert_gone, descendants, wait_for

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

BIN = Path(sys.executable).parent / "mpwatch"


class Tmux:
    def __init__(self, cwd: Path, size: tuple[int, int] = (120, 40), env: dict[str, str] | None = None):
        self.sock = f"mpwatch-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.cwd = cwd
        self.size = size
        self.env = dict(env or {})
        if os.environ.get("PYTHONPATH"):  # a checkout run with PYTHONPATH=$PWD tests its own code
            self.env.setdefault("PYTHONPATH", os.environ["PYTHONPATH"])

    def __call__(self, *args, check=True) -> str:
        res = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=30)
        if check:
            assert res.returncode == 0, f"tmux {args}: {res.stderr}"
        return res.stdout

    def start(self):
        w, h = self.size
        self("-f", "/dev/null", "new-session", "-d", "-x", str(w), "-y", str(h), "-s", "e2e", "-c", str(self.cwd),
             "env", "-i", f"PATH={os.environ['PATH']}", f"HOME={os.environ.get('HOME', '/tmp')}",
             "LANG=C.UTF-8", "TERM=xterm-256color", "PS1=$ ", *[f"{k}={v}" for k, v in self.env.items()],
             "bash", "--norc", "--noprofile")

    def type(self, line: str):
        self("send-keys", "-t", "e2e", line, "Enter")

    def key(self, key: str):
        self("send-keys", "-t", "e2e", key)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "e2e")

    def wait_screen(self, pred, what: str, timeout: float = 60.0) -> str:
        """The first screen that matches and has settled: Textual paints a new screen in more than
        one write (its footer after its body), and a capture between them matches a title whose
        footer is not drawn yet. Settled: the next capture, 0.2 s on, is the same; a screen that
        keeps changing (a clock, a heartbeat) is taken as it is after 1.5 s."""
        try:
            s = wait_for(lambda: (lambda s: s if pred(s) else None)(self.screen()), timeout, interval=0.2,
                         what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen was:\n{self.screen()}") from None
        for _ in range(7):
            time.sleep(0.2)
            again = self.screen()
            if again == s or not pred(again):
                return s
            s = again
        return s

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
    try:  # a line the supervisor is writing now is skipped, not the whole file
        pids.update(rec["pid"] for rec in read_jsonl(run_dir / "events.jsonl", ["worker_started"]))
    except OSError:
        pass
    pids.update(descendants(*pids))
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
    wait_for(lambda: any(read_jsonl(run_dir / "events.jsonl", ["paused"])),  # flushed twice a second
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


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_gpus_rows_and_each_ranks_gpu_memory_on_screen(tmp_path, size, libnvml):
    """The issue's scenario, for real: a supervisor on the stand-in NVML library (two GPUs; ranks 0
    and 1 on GPU 0 at 93%; rank 0's child and an outside process there; GPU 1 idle), real
    workers, the TUI in a tmux pane. Every number is checked against `ctl status --json`."""
    from mpwatch.text import fmt
    from tests.helpers import mpwatch
    from tests.libnvml import nvml_overlay
    from tests.record import WORKER, cuda_two_gpus, nvml_two_gpus, unused_pid

    cuda = tmp_path / "cuda.json"
    cuda.write_text(json.dumps(cuda_two_gpus()))
    run_dir = tmp_path / "run"
    tmux = Tmux(tmp_path, size, {**nvml_overlay(libnvml, tmp_path, nvml_two_gpus(unused_pid())),
                                 "MPWATCH_SCRIPTED_CUDA": str(cuda),
                                 "CHILD": "0", "SLEEP": "0.1"})
    tmux.start()
    try:
        tmux.type(f"{BIN} -n 2 --grace 2 --gpu-interval 0.5 --run-dir {run_dir} {WORKER}; echo MPWATCH-EXIT=$?")
        wait_for(lambda: (run_dir / "control.json").exists(), 60, what="the supervisor")

        def expected() -> list[str]:
            """What the screen must show, from the producer's own status right now."""
            res = mpwatch("ctl", "--run", run_dir, "status", "--json")
            if res.returncode != 0:
                return ["(no status)"]
            st = json.loads(res.stdout)
            if len(st["gpus"]) != 2 or any(not w["gpu"] or w["gpu"]["mem_bytes"] is None for w in st["workers"]):
                return ["(no GPU data yet)"]
            if st["gpus"][0]["util_gpu"] != 93:
                return ["(the scenario's memory still ramps up)"]
            want = [f"{w['gpu']['index']} {fmt.size(w['gpu']['mem_bytes'])}" for w in st["workers"]]
            for g in st["gpus"]:
                want.append(f"{fmt.size(g['mem_used'])}/{fmt.size(g['mem_total'])}")
                want.append(fmt.pct(g["util_gpu"]))
            return want

        def shows_all(screen: str) -> bool:
            rows = [ln for ln in screen.splitlines() if ln.startswith(("  0 ", "  1 "))]
            # ...and no notification over the GPU rows (they fade within seconds)
            return all(text in screen for text in expected()) and any("r0,1⚠" in r for r in rows)

        screen = tmux.wait_screen(shows_all, "both GPUs and each rank's GPU memory", timeout=90)
        lines = screen.splitlines()
        gpu0 = next(ln for ln in lines if ln.startswith("  0 ") and "%" in ln)
        gpu1 = next(ln for ln in lines if ln.startswith("  1 ") and "%" in ln)
        assert "93%" in gpu0 and "r0,1⚠" in gpu0 and "out " in gpu0  # util, the collision, the outsider
        assert " 0%" in gpu1 and "r" not in gpu1.split("%", 1)[1]  # GPU 1 idle, no rank on it
        assert "util N/A" not in screen
        rows = [ln for ln in lines if re.match(r"^ [ ▾▸]?[01] .*● running", ln)]
        assert len(rows) == 2 and all("⚠" in r for r in rows)  # each rank's GPU cell marks the collision

        tmux.key("g")
        tmux.wait_screen(lambda s: "GPU 0  memory" in s and "last 2 min" in s and "util 93%" in s,
                         "the GPU screen, at 93%")
        tmux.key("Escape")
        tmux.wait_screen(lambda s: "RANK" in s and "STATE" in s, "the main screen again")
        pids = run_pids(run_dir)
        tmux.key("q")
        tmux.wait_screen(lambda s: "Stop the run" in s, "the quit dialog")
        tmux.key("s")
        tmux.wait_screen(lambda s: "MPWATCH-EXIT=1" in s, "mpwatch to exit after stopping", timeout=90)
        assert_gone(pids | run_pids(run_dir))
    finally:
        tmux.kill()
        for pid in run_pids(run_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
