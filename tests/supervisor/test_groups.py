"""The process-group room alone (no run): a kill reaches a whole group that ignores
SIGTERM, by the deadline checked each tick, and the group is forgotten once empty."""
import os
import signal
import subprocess
import sys
import threading
import time

from mpwatch.contract import State
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.workers.groups import ProcessGroups
from mpwatch.supervisor.workers.worker import Attempt, Worker
from tests.helpers import alive, assert_gone, wait_for

STUBBORN = r"""
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_group_that_ignores_sigterm_is_killed_at_its_deadline_whole(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        child = int(proc.stdout.readline())
        store = RunStore(tmp_path, Settings())
        store.create()
        log = EventLog(store)
        w = Worker(0, Attempt(proc, 1), State.STARTING, "test", log, strict=True, pid=proc.pid)
        groups = ProcessGroups({0: w}, threading.RLock(), log)
        groups.watch(proc.pid, 0)
        t0 = time.monotonic()
        assert groups.kill(w, "kill", grace=0.5)
        assert w.attempt.kill_reason == "kill" and groups.pending(proc.pid)

        def tick():
            now = time.monotonic()
            if proc.poll() is None:
                groups.enforce(w, now)
            elif w.attempt.exit_seen is None:
                w.attempt.exit_seen = now
                groups.after_exit(w, grace=0.5)
            groups.reap(now)
            return not groups.pending(proc.pid)

        wait_for(tick, timeout=30, what="the group to be killed and forgotten")
        assert proc.returncode == -signal.SIGKILL and time.monotonic() - t0 >= 0.5  # TERM was ignored
        assert not alive(child) and not groups.ending()
        assert w.attempt.unkillable is None and not log.alerts()
        store.close()
    finally:  # never leave the group behind, whatever failed
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    assert_gone([proc.pid, child])
