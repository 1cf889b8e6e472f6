"""A launch that cannot flood the machine (issue 30, item 1). -n, --nproc-per-node and `resize`
share one bound (supervisor.options.worker_cap): past it the command line says so in one line
with exit code 2 and nothing starts. And a launch in progress, at the bound, is cancelled by
`ctl stop`, SIGTERM and Ctrl-C (SIGINT) at once, headless and in a supervisor whose TUI was
killed: the supervisor is frozen (SIGSTOP) just after its first workers start, the stop is
sent, it is thawed; it starts at most a few more (a tick's batch), everything of the run is
gone within moments, checked over the whole process table with psutil (no orphan).

The stopped cases run at MPWATCH_MAX_WORKERS=256 with /bin/sleep workers (cheap to fork, so
the old code's loop got through all 256 before it read the stop), and at the machine's own
bound with Python workers."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mpwatch.rundir import reader
from mpwatch.supervisor import options
from tests.documented import RANKS_PER_TICK
from tests.faults.test_tui_killed import Tmux
from tests.helpers import MPWATCH, assert_run_gone, helpers_of, mpwatch, one_line_error, wait_for

pytestmark = pytest.mark.timeout(300)
BIN = Path(sys.executable).parent / "mpwatch"
WIDE = 256  # MPWATCH_MAX_WORKERS in the stopped cases
SLACK = 3 * RANKS_PER_TICK  # ranks the supervisor may start between its thaw and the stop


def test_n_past_the_bound_is_one_line_and_starts_nothing(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('never')\n")
    cap = options.machine_cap()
    for args in (["--headless", "-n", "100000"], ["-n", "1000000000"],
                 ["--headless", "--nproc-per-node", cap + 1], ["--headless", "--nproc_per_node", cap + 1]):
        res = mpwatch(*args, script, cwd=tmp_path, env={k: v for k, v in os.environ.items()
                                                         if k != "MPWATCH_MAX_WORKERS"})
        one_line_error(res, f"at most {cap} workers on this machine (MPWATCH_MAX_WORKERS sets another bound)")
    env = dict(os.environ, MPWATCH_MAX_WORKERS="4")
    one_line_error(mpwatch("--headless", "-n", "5", script, cwd=tmp_path, env=env), "-n 5: at most 4 workers")
    assert not (tmp_path / "mpwatch-runs").exists() or not list((tmp_path / "mpwatch-runs").iterdir())
    assert f"at most {cap} here" in " ".join(mpwatch("--help").stdout.split())


def _workers(sup: int) -> list[int]:
    helpers = set(helpers_of(sup))
    try:
        return [c.pid for c in psutil.Process(sup).children() if c.pid not in helpers]
    except psutil.Error:
        return []


def _freeze_mid_launch(sup: subprocess.Popen | int, control: Path) -> int:
    """Freeze the supervisor as soon as its launch has begun; the workers it has by then."""
    pid = sup if isinstance(sup, int) else sup.pid
    ended = (lambda: False) if isinstance(sup, int) else (lambda: sup.poll() is not None)
    wait_for(lambda: control.exists() or ended(), 60, interval=0.002, what="the supervisor's control.json")
    wait_for(lambda: _workers(pid) or ended(), 60, interval=0.002, what="the first workers")
    os.kill(pid, signal.SIGSTOP)
    return len(_workers(pid))


def _stop(how: str, pid: int, run_dir: Path) -> subprocess.Popen | None:
    """Send the stop to a frozen supervisor (it acts on it once thawed): a signal, or `ctl stop`
    as a process, once that has connected (the frozen supervisor's kernel takes the connection;
    ctl then sleeps, waiting for the key's challenge)."""
    if how != "ctl":
        os.kill(pid, signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        return None
    ctl = subprocess.Popen([*MPWATCH, "ctl", "--run", str(run_dir), "stop"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)

    def waiting() -> bool:
        p = psutil.Process(ctl.pid)
        return bool(p.net_connections("unix")) and p.status() == psutil.STATUS_SLEEPING
    wait_for(lambda: ctl.poll() is not None or waiting(), 60, interval=0.01, what="ctl connected")
    return ctl


def _exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _cancelled(run, before: int, n: int, ctl: subprocess.Popen | None) -> None:
    assert run.wait_exit(60) == 1
    if ctl is not None:
        _, err = ctl.communicate(timeout=60)
        assert ctl.returncode == 0, err
    started = run.events("worker_started")
    assert len(started) < n and len(started) <= before + SLACK, \
        f"{len(started)} of {n} workers started; {before} were when the stop was sent"
    assert run.events("stopping")
    run.assert_gone()


@pytest.mark.parametrize("how", ["ctl", "SIGTERM", "SIGINT"])
def test_a_launch_at_the_bound_is_cancelled_at_once(headless, how):
    env = dict(os.environ, MPWATCH_MAX_WORKERS=str(WIDE))
    run = headless("/bin/sleep", "600", n=WIDE, opts=["--no-python", "--grace", "1"], env=env, start=False)
    run.start_at_once()
    before = _freeze_mid_launch(run.proc, run.run_dir / "control.json")
    try:
        ctl = _stop(how, run.proc.pid, run.run_dir)
    finally:
        os.kill(run.proc.pid, signal.SIGCONT)
    _cancelled(run, before, WIDE, ctl)


def test_a_launch_of_python_workers_at_the_machines_bound_is_cancelled_by_sigterm(headless, tmp_path):
    script = tmp_path / "sleeps.py"
    script.write_text("import time\ntime.sleep(600)\n")
    cap = options.machine_cap()
    env = {k: v for k, v in os.environ.items() if k != "MPWATCH_MAX_WORKERS"}
    run = headless(script, n=cap, opts=["--grace", "1"], env=env, start=False)
    run.start_at_once()
    before = _freeze_mid_launch(run.proc, run.run_dir / "control.json")
    try:
        _stop("SIGTERM", run.proc.pid, run.run_dir)
    finally:
        os.kill(run.proc.pid, signal.SIGCONT)
    _cancelled(run, before, cap, None)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_supervisor_whose_tui_was_killed_is_stopped_mid_launch(tmp_path):
    tmux = Tmux()
    cmd = (f"cd {tmp_path} && MPWATCH_MAX_WORKERS={WIDE} TERM=xterm-256color LANG=C.UTF-8 "
           f"{BIN} -n {WIDE} --no-python --grace 1 /bin/sleep 600")
    sup_pid = None
    try:
        tmux("new-session", "-d", "-x", "120", "-y", "40", "-s", "tui", cmd)
        control = wait_for(lambda: next(iter((tmp_path / "mpwatch-runs").glob("*/control.json")), None), 60,
                           interval=0.002, what="the supervisor's control.json")
        run_dir = control.parent
        sup_pid = int(json.loads(control.read_text())["pid"])
        before = _freeze_mid_launch(sup_pid, control)
        sup_tree = {sup_pid, *(c.pid for c in psutil.Process(sup_pid).children(recursive=True))}
        tui = [p for p in tmux.pane_procs("tui") if p.pid not in sup_tree]
        assert any("mpwatch" in " ".join(p.cmdline()) for p in tui), "no TUI process in the pane"
        for p in tui:  # the TUI goes; its supervisor, in a session of its own, stays
            p.send_signal(signal.SIGKILL)
        tmux("kill-server", check=False)
        assert psutil.Process(sup_pid).status() == psutil.STATUS_STOPPED
        ctl = _stop("ctl", sup_pid, run_dir)
        os.kill(sup_pid, signal.SIGCONT)
        _, err = ctl.communicate(timeout=60)
        assert ctl.returncode == 0, err
        run_id = run_dir.name
        wait_for(lambda: _exited(sup_pid), 60, what="the supervisor to exit")
        started = [e for e in reader.read_events(run_dir) if e.get("event") == "worker_started"]
        assert len(started) < WIDE and len(started) <= before + SLACK, (len(started), before)
        assert_run_gone(run_id, [sup_pid])
    finally:
        tmux("kill-server", check=False)
        if sup_pid is not None and psutil.pid_exists(sup_pid):
            try:
                os.kill(sup_pid, signal.SIGCONT)
                os.kill(sup_pid, signal.SIGKILL)
            except OSError:
                pass
