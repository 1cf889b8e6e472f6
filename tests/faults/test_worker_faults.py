"""Workers that die in every way, that will not die, and that multiply (issue 8).

Every case ends by walking the process table: no worker, child or grandchild survives.
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from mpwatch.tui.render import glyphs, view
from tests.faults.conftest import FAULTS, final, helpers_of, pid_lines, reporting
from tests.helpers import MPWATCH, alive, assert_gone, assert_run_gone, of_run, wait_for

pytestmark = pytest.mark.timeout(180)

CRASHES = {
    # mode: (state, exit_code, signal, text the cause must hold)
    "sigkill": ("failed", None, "SIGKILL", "signal SIGKILL: last words of sigkill"),
    "segv": ("failed", None, "SIGSEGV", "signal SIGSEGV: last words of segv"),
    "exit3": ("failed", 3, None, "exit 3: last words of exit3"),
}


@pytest.mark.parametrize("mode", sorted(CRASHES))
def test_crash_is_shown_with_its_cause_and_restarts_are_capped(headless, mode):
    state, code, sig, cause = CRASHES[mode]
    run = headless(FAULTS / "crash.py", mode, n=1, opts=["--max-restarts", "2", "--grace", "1"])
    assert run.wait_exit(timeout=90) == 1
    starts = run.events("worker_started")
    assert len(starts) == 3, "the first start and exactly --max-restarts restarts"
    assert len({e["pid"] for e in starts}) == 3
    restarted = run.events("restarted")
    assert [e["attempt"] for e in restarted] == [1, 2]
    assert all(cause.split(":")[0] in e["why"] for e in restarted)
    exits = run.events("worker_exited")
    assert len(exits) == 3
    for e in exits:
        assert (e["state"], e["exit_code"], e["signal"]) == (state, code, sig)
        assert e["cause"].startswith(cause), e["cause"]
        # the crash's last words are kept in the event and in the log
        assert any(f"last words of {mode} pid {e['pid']}" in line for line in e["stderr_tail"])
    w = final(run)["workers"][0]
    assert (w["state"], w["exit_code"], w["signal"], w["restarts"]) == (state, code, sig, 2)
    assert w["cause"].startswith(cause)
    assert final(run)["run"]["restarts"] == 2
    log = (run.run_dir / "rank-0" / "stderr.log").read_text()
    assert log.count(f"last words of {mode}") == 3 and log.count("rank 0 restarted") == 2
    run.assert_gone()


LEAVE_CWD = """import os, sys
os.rmdir(os.getcwd())  # the directory the supervisor starts its workers in
sys.exit(3)
"""


def test_a_worker_that_cannot_start_is_failed_and_said_so(tmp_path):
    """Popen itself fails (here: the run's working directory was removed, by the first
    attempt, before the restart): the worker is failed, its cause is why, and the
    headless line says so."""
    work, run_dir, script = tmp_path / "work", tmp_path / "run", tmp_path / "leave_cwd.py"
    work.mkdir()
    script.write_text(LEAVE_CWD)
    sup = subprocess.Popen([*MPWATCH, "--headless", "-n", "1", "--max-restarts", "1", "--run-dir", str(run_dir),
                            str(script)], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        _, err = sup.communicate(timeout=120)
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
    assert sup.returncode == 1, err
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    exited = [e for e in events if e["event"] == "worker_exited"]
    assert [(e["state"], e["exit_code"]) for e in exited] == [("failed", 3), ("failed", None)]
    assert exited[1]["cause"] == "could not start: No such file or directory" and exited[1]["pid"] is None
    assert [e["attempt"] for e in events if e["event"] == "restarted"] == [1]
    lines = [line for line in err.splitlines() if "could not start" in line]  # said once, then the run's end
    assert len(lines) == 2 and lines[0].endswith("rank 0 failed: could not start: No such file or directory")
    assert lines[1].endswith("run ended: exit code 1: rank 0 could not start: No such file or directory"), lines
    w = json.loads((run_dir / "final.json").read_text())["workers"][0]
    assert (w["state"], w["pid"], w["restarts"]) == ("failed", None, 1)
    assert w["cause"].startswith("could not start")
    assert_run_gone(json.loads((run_dir / "run.json").read_text())["run_id"],
                    {sup.pid} | {e["pid"] for e in events if e["event"] == "worker_started"})


def test_early_clean_exit_is_shown_and_not_restarted(headless):
    run = headless(FAULTS / "crash.py", "exit0", n=2, opts=["--max-restarts", "2"])
    assert run.wait_exit(timeout=60) == 0
    assert len(run.events("worker_started")) == 2 and not run.events("restarted")
    for w in final(run)["workers"]:
        assert (w["state"], w["exit_code"], w["cause"], w["restarts"]) == ("exited", 0, "exit 0", 0)
        assert w["step"] == 2
    run.assert_gone()


def test_kill_reaches_children_and_grandchildren_that_ignore_sigterm(headless):
    run = headless(FAULTS / "term_ignorers.py", "3", n=2, opts=["--grace", "1"])
    wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    made = pid_lines(run, 0, 4)
    worker = run.worker(0)["pid"]
    assert all(alive(p) for p in made)
    assert {worker, *made} <= of_run(run.run_id)  # the table walk that ends each case sees them all
    out = run.ctl("kill", "0").stdout
    assert "SIGTERM sent" in out
    w = run.wait_state(0, "killed")
    assert w["signal"] == "SIGKILL" and w["cause"] == "killed on request (SIGKILL)"
    assert_gone([worker, *made])
    # the other rank was left alone
    assert run.worker(1)["state"] == "running"
    others = pid_lines(run, 1, 4)
    assert all(alive(p) for p in others)
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone(*others)


def test_worker_with_twenty_children_is_shown_and_stopped_whole(headless):
    run = headless(FAULTS / "steady.py", "20", n=1)
    sup = run.proc.pid
    st = wait_for(lambda: (lambda s: s if len(s["workers"][0]["children"]) == 20 else None)(run.status()),
                  what="20 children in the worker's row")
    kids = [c["pid"] for c in st["workers"][0]["children"]]
    assert all(c["ppid"] == st["workers"][0]["pid"] for c in st["workers"][0]["children"])
    # the TUI's table (its pure layer, fed this status): the worker's row, then a row per child
    rows = view.table_rows(st)
    assert [key for key, _ in rows[:1]] == ["w0"] and {key for key, _ in rows[1:]} == {f"w0.{p}" for p in kids}
    cols = view.columns(160)
    pid_at = [c.key for c in cols].index("pid")
    assert sorted(int(view.row_cells(src, cols, glyphs.ASCII)[pid_at]) for _, src in rows[1:]) == sorted(kids)
    watchdog = helpers_of(sup)
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone(*kids, *watchdog)


# ---------------------------------------------------------------- D state ----
FREEZER = Path("/sys/fs/cgroup/freezer")


def _freezer_usable() -> str | None:
    """Why an uninterruptible process cannot be made here, or None when it can."""
    if not (FREEZER / "cgroup.procs").exists():
        return ("no cgroup-v1 freezer at /sys/fs/cgroup/freezer; other ways to a real D state need "
                "a FUSE/NFS server that hangs (not available) and a vfork parent or a ptrace-stopped "
                "process is killable, so it would not test the case")
    if not os.access(FREEZER, os.W_OK):
        return "the cgroup-v1 freezer is read-only here"
    return None


class Frozen:
    """Processes held in a frozen cgroup-v1 freezer: state D, SIGKILL stays pending until thawed."""

    def __init__(self, name: str):
        self.dir = FREEZER / name

    def freeze(self, pids):
        self.dir.mkdir()
        for pid in pids:
            (self.dir / "cgroup.procs").write_text(str(pid))
        (self.dir / "freezer.state").write_text("FROZEN")
        wait_for(lambda: (self.dir / "freezer.state").read_text().strip() == "FROZEN", what="the freeze")

    def thaw(self):
        if not self.dir.exists():
            return
        (self.dir / "freezer.state").write_text("THAWED")
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                (FREEZER / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # it has exited meanwhile
        wait_for(lambda: not (self.dir / "cgroup.procs").read_text().split(), what="the cgroup to empty")
        self.dir.rmdir()


@pytest.mark.slow
@pytest.mark.skipif(_freezer_usable() is not None, reason=str(_freezer_usable()))
@pytest.mark.root("a cgroup-v1 freezer")
def test_stop_ends_and_names_a_process_it_could_not_kill(headless):
    run = headless(FAULTS / "steady.py", "1", n=2, opts=["--grace", "1"])
    st = wait_for(lambda: (lambda s: s if s and all(len(w["children"]) == 1 for w in s["workers"]) else None)(
        reporting(run, 2)), what="both ranks reporting, each with a child")
    stuck = [st["workers"][0]["pid"], st["workers"][0]["children"][0]["pid"]]
    cage = Frozen(f"mpwatch-test-{os.getpid()}-{time.monotonic_ns()}")
    try:
        cage.freeze(stuck)
        assert all(psutil.Process(p).status() == psutil.STATUS_DISK_SLEEP for p in stuck)
        run.ctl("stop")
        # TERM, 1 s grace, KILL, then UNKILLABLE_S before giving up: the run still ends.
        assert run.wait_exit(timeout=60) == 1
        alerts = [a for a in final(run)["alerts"] if a["kind"] == "unkillable"]
        assert alerts, final(run)["alerts"]
        named = {p["pid"]: p for a in alerts for p in a["processes"]}
        assert set(stuck) <= set(named)
        said = " ".join(a["message"] for a in alerts)
        for pid in stuck:  # each with its state: uninterruptible sleep, as psutil names it
            assert named[pid]["status"] == psutil.STATUS_DISK_SLEEP, named[pid]
            assert f"pid {pid} (" in said and f"state {psutil.STATUS_DISK_SLEEP})" in said, said
        assert "could not kill" in run.stderr_text and str(stuck[0]) in run.stderr_text
        # rank 1 went normally; nothing else lingers
        w1 = final(run)["workers"][1]
        assert w1["state"] == "killed"
        assert_gone(run.all_pids() - set(stuck))
        assert all(alive(p) for p in stuck), "still stuck: the test is not vacuous"
    finally:
        cage.thaw()
    assert_gone(stuck)  # the pending SIGKILL lands once thawed
