"""The dump room alone (no run): two stall dumps of one rank in a row, with py-spy's native
stacks, each get the Python stack. py-spy holds a process in a tracing stop for a while; a
second dump that started meanwhile found the process stopped and got no Python stack at all,
so the stall read as "where: none" (seen on a loaded box, where start-up stalls come early)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from mpwatch.contract import Event, State
from mpwatch.probes import pyspy
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor import spawn
from mpwatch.supervisor.diagnose.dumps import Dumper
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.workers.worker import Attempt, Worker
from tests.helpers import wait_for


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


NAPPING = ("import sys, time\n"
           "def napping():\n    open(sys.argv[1], 'w').close()\n    time.sleep(600)\nnapping()\n")


def test_dumps_of_one_rank_never_overlap_so_each_has_the_python_stack(tmp_path):
    if not pyspy.find():
        pytest.skip("py-spy is not installed (the native stacks are what holds a process stopped)")
    settings = Settings(pyspy="always")
    store = RunStore(tmp_path / "run", settings)
    store.create()
    paths = store.rank_paths(0)
    ready = tmp_path / "ready"
    env = dict(os.environ, MPWATCH_STACK_FILE=str(paths.stack_file),
               PYTHONPATH=os.pathsep.join([spawn.INJECT_DIR, os.environ.get("PYTHONPATH", "")]))
    env.pop("MPWATCH_SUPERVISOR_PID", None)
    proc = subprocess.Popen([sys.executable, "-c", NAPPING, str(ready)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(ready.exists, 60, what="the worker to start napping")
        log = EventLog(store)
        w = Worker(0, Attempt(proc, 1), State.STARTING, "test", log, strict=True, pid=proc.pid)
        dumper = Dumper(store, threading.RLock(), log, settings)
        dumper.dump_async([w], reason="request")
        # The second dump is asked for while py-spy holds the process in its tracing stop.
        wait_for(lambda: _state(proc.pid) == "t", 60, interval=0.0005, what="py-spy to stop the process")
        dumper.dump_async([w], reason="request")
        dumps = wait_for(lambda: (lambda d: d if len(d) == 2 else None)(
            [e for e in log.since(0)[0] if e["event"] == Event.DUMP]), 120, what="two dump events")
        for e in dumps:
            assert e["innermost"] and e["innermost"].startswith("napping"), (e, e["notes"])
            text = (store.dir / e["path"]).read_text()
            assert "in napping" in text, text[:2000]
        store.close()
    finally:
        proc.kill()
        proc.wait()
