"""Processes that would outlive their run or swamp the box (issue 22, items 2 and 3): a classic
daemon that leaves its worker's tree and group is ended by `stop`, `kill`, the end of its
worker and the watchdog, found by the run's marks (its environment; its cgroup where one can
be made), and another user's process is never touched; `resize` is bounded, starts new
ranks a few a tick, and `stop` cancels it at once; a worker that starts after its supervisor
is gone exits."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from mpwatch.sources.local import Client
from mpwatch.supervisor import options, spawn
from mpwatch.supervisor.workers import marks
from tests.documented import RANKS_PER_TICK
from tests.faults.conftest import FAULTS, NOBODY, helpers_of, pid_lines, reporting
from tests.faults.hostile import needs_root
from tests.helpers import FIXTURES, alive, assert_gone, assert_run_gone, mpwatch, one_line_error, wait_for

pytestmark = pytest.mark.timeout(300)
DAEMON = FAULTS / "daemonizer.py"


def left_its_group(pid: int, worker: int) -> bool:
    p = psutil.Process(pid)
    return p.ppid() != worker and os.getpgid(pid) != worker and worker not in [a.pid for a in p.parents()]


def test_stop_ends_a_daemon_that_left_its_workers_tree_and_group(headless):
    run = headless(DAEMON, n=2, opts=["--grace", "2"])
    daemons = [pid_lines(run, r, 1)[0] for r in (0, 1)]
    st = wait_for(lambda: reporting(run, 2), 60, what="both ranks reporting")
    for r, pid in enumerate(daemons):
        assert alive(pid) and left_its_group(pid, st["workers"][r]["pid"])
    run.ctl("stop")
    assert run.wait_exit(60) == 1
    assert_gone(daemons)
    assert st["run"]["id"] not in mpwatch("ls").stdout


def test_kill_ends_the_ranks_daemon_and_only_it(headless):
    run = headless(DAEMON, n=2, opts=["--grace", "2"])
    d0, d1 = (pid_lines(run, r, 1)[0] for r in (0, 1))
    wait_for(lambda: reporting(run, 2), 60, what="both ranks reporting")
    run.ctl("kill", "0")
    assert_gone([d0])
    assert alive(d1) and run.worker(1)["state"] == "running"
    run.ctl("stop")
    assert run.wait_exit(60) == 1
    assert_gone([d1])


def test_a_daemon_left_by_a_worker_that_ended_is_ended_before_the_run_finishes(headless, tmp_path):
    script = tmp_path / "leave_daemon.py"
    script.write_text(DAEMON.read_text().replace("step = 0\nwhile True:", "step = 0\nwhile step < 20:"))
    run = headless(script, n=1)
    (daemon,) = pid_lines(run, 0, 1)
    assert run.wait_exit(60) == 0
    assert_gone([daemon])


def test_the_watchdog_ends_a_daemon_when_the_supervisor_is_sigkilled(headless):
    run = headless(DAEMON, n=1)
    (daemon,) = pid_lines(run, 0, 1)
    wait_for(lambda: reporting(run, 1), 60, what="rank 0 reporting")
    pids = run.all_pids()
    os.kill(run.proc.pid, signal.SIGKILL)
    run.wait_exit(30)
    assert_gone([daemon, *pids])


def cgroups_here() -> str | None:
    """None when this user can make a cgroup (v2) here, else why not."""
    probe = marks.cgroup_for(f"probe-{os.getpid()}")
    if probe is None:
        return "no cgroup v2 this user may make a cgroup in (not root, not delegated)"
    probe.rmdir()
    return None


@pytest.mark.root("making a cgroup v2 of the run")
def test_a_daemon_with_an_empty_environment_is_held_by_the_runs_cgroup(headless):
    why = cgroups_here()
    if why:
        pytest.skip(why)
    run = headless(DAEMON, "bare", n=1, opts=["--grace", "1"])
    (daemon,) = pid_lines(run, 0, 1)
    wait_for(lambda: reporting(run, 1), 60, what="rank 0 reporting")
    wait_for(lambda: open(f"/proc/{daemon}/environ", "rb").read() == b"", 30, what="the daemon's bare exec")
    run.ctl("stop")
    assert run.wait_exit(60) == 1
    assert_gone([daemon])
    assert not any(p.name.startswith(f"{marks.CGROUP_PREFIX}") and run.run_dir.name in p.name
                   for p in (marks._cgroup2_mount() or run.tmp).rglob(f"{marks.CGROUP_PREFIX}*"))


@needs_root
def test_another_users_process_is_never_touched_whatever_its_environment(headless):
    """A process of uid 65534 that carries root's run mark in its environment: the run's
    stop and its watchdog leave it alone (only this user's processes are ever signalled)."""
    run = headless(DAEMON, n=1, opts=["--grace", "1"])
    wait_for(lambda: reporting(run, 1), 60, what="rank 0 reporting")
    pid = run.worker(0)["pid"]
    env = dict(psutil.Process(pid).environ())
    theirs = subprocess.Popen(["/bin/sleep", "600"], env=env, user=NOBODY, group=NOBODY, extra_groups=[],
                              start_new_session=True)
    try:
        wait_for(lambda: helpers_of(run.proc.pid), 30, what="the supervisor's watchdog")
        watchdog = helpers_of(run.proc.pid)
        run.ctl("stop")
        assert run.wait_exit(60) == 1
        # the watchdog sweeps the run's marks as the supervisor closes its pipe, then ends: it has
        # looked once it is gone (a fixed 0.5 s passed before it had, on a loaded box)
        assert_gone(watchdog, timeout=60)
        assert theirs.poll() is None, "another user's process was killed"
    finally:
        theirs.kill()
        theirs.wait()


def test_resize_past_the_cap_is_refused_in_one_line(headless):
    env = dict(os.environ, MPWATCH_MAX_WORKERS="4")
    run = headless("/bin/sleep", "600", n=1, opts=["--no-python", "--resize-mode", "independent", "--grace", "1"],
                   env=env)
    wait_for(lambda: run.status()["workers"][0]["state"] == "running", 60, what="rank 0 running")
    one_line_error(run.ctl("resize", "5", check=False), "cannot resize to 5 workers: at most 4 on this machine")
    assert len(run.status()["workers"]) == 1
    run.ctl("resize", "4")
    wait_for(lambda: len(run.status()["workers"]) == 4, 60, what="4 workers")
    run.ctl("stop")
    assert run.wait_exit(60) == 1


def test_the_default_cap_comes_from_the_machine(headless):
    cap = options.machine_cap()
    assert cap >= max(64, 4 * (os.cpu_count() or 1))
    run = headless("/bin/sleep", "600", n=1, opts=["--no-python", "--grace", "1"])
    wait_for(lambda: run.status()["workers"][0]["pid"], 60, what="rank 0 started")
    one_line_error(run.ctl("resize", "1000000", check=False), f"at most {cap} on this machine (MPWATCH_MAX_WORKERS)")
    run.ctl("stop")
    assert run.wait_exit(60) == 1


@pytest.mark.parametrize("mode", ["independent", "restart"])
def test_stop_cancels_a_resize_at_once(headless, mode):
    """resize 200 then stop, on one connection, back to back: the ranks are started a few a
    tick, so the stop is handled a tick later and no more are started."""
    env = dict(os.environ, MPWATCH_MAX_WORKERS="256")
    run = headless("/bin/sleep", "600", n=1, opts=["--no-python", "--resize-mode", mode, "--grace", "1"], env=env)
    wait_for(lambda: run.status()["workers"][0]["pid"], 60, what="rank 0 started")
    with Client.at(run.run_dir) as client:
        client.resize(200)
        client.stop()
    assert run.wait_exit(120) == 1
    started = run.events("worker_started")
    assert len(started) <= 2 + 3 * RANKS_PER_TICK, f"{len(started)} workers started after the stop"
    assert run.events("stopping")
    assert_gone(run.all_pids())


def test_a_worker_that_starts_after_its_supervisor_is_gone_exits(tmp_path):
    """The start-up hook: a process of a run whose supervisor is dead (it was being started as
    the supervisor was killed) never runs its script; one whose supervisor lives but is not
    its parent (a child of a worker) does."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that was the supervisor's and is no more
    script = tmp_path / "ran.py"
    script.write_text("import sys; open(sys.argv[1], 'w').write('ran')\n")
    env = dict(os.environ, PYTHONPATH=spawn.INJECT_DIR)
    for sup, ran in ((gone.pid, False), (os.getppid(), True)):
        out = tmp_path / f"out-{sup}"
        res = subprocess.run([sys.executable, str(script), str(out)], env={**env, "MPWATCH_SUPERVISOR_PID": str(sup)},
                             timeout=60)
        assert out.exists() == ran and res.returncode == (0 if ran else 1), (sup, res.returncode)


def test_a_supervisor_killed_in_the_middle_of_a_resize_leaves_nothing(headless):
    """The run from the issue: a resize under way when the supervisor gets SIGKILL; every
    process of the run is gone, found by its environment (not only the pids it told)."""
    env = dict(os.environ, MPWATCH_MAX_WORKERS="256")
    run = headless(FIXTURES / "forever.py", n=1, opts=["--resize-mode", "independent", "--grace", "1"], env=env)
    wait_for(lambda: reporting(run, 1, 0), 60, what="rank 0 running")
    run_id = run.status()["run"]["id"]
    with Client.at(run.run_dir) as client:
        client.resize(60)
    wait_for(lambda: len(run.events("worker_started")) >= 10, 60, what="the resize under way")
    os.kill(run.proc.pid, signal.SIGKILL)
    run.wait_exit(30)
    # found by the test's own scan of the process table (tests.helpers.of_run), never by the
    # product's marks.scan: a scan that finds nothing would have passed
    assert_run_gone(run_id, run.all_pids(), timeout=60)


@pytest.mark.root("making a cgroup v2 of the run")
def test_an_empty_cgroup_left_by_a_dead_supervisor_is_removed_by_the_next_run():
    why = cgroups_here()
    if why:
        pytest.skip(why)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    probe = marks.cgroup_for(f"probe-{os.getpid()}")
    assert probe is not None
    probe.rmdir()
    stale = probe.parent / f"{marks.CGROUP_PREFIX}left-{gone.pid}"
    stale.mkdir()
    (stale / "rank-0").mkdir()
    again = marks.cgroup_for(f"next-{os.getpid()}")
    try:
        assert again is not None and not stale.exists()
    finally:
        again.rmdir()
