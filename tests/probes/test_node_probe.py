"""Issue 41: what else the node does (probes.node), read from real processes: a busy process outside
the run is named by pid, user and command with its share of a CPU; the run's own processes (the
supervisor's tree, the pids it is told, and their descendants) never are; supervisor.diagnose.machine
says it as a cause once they take enough of the node, and not for a quiet one."""
from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time

from mpwatch.probes.node import MIN_CPU, NodeProbe, vmstat
from mpwatch.supervisor.diagnose import machine

SPIN = "while True: pass"
SPAWN_SPIN = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {SPIN!r}]).wait()"


def started(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_a_busy_process_outside_the_run_is_named_and_the_runs_own_never_are():
    stand_in = subprocess.Popen(["sleep", "60"])  # the supervisor whose tree is the run
    outside, ours = started(SPIN), started(SPAWN_SPIN)  # ours: a rank, its busy child below it
    probe = NodeProbe(own=stand_in.pid)
    try:
        assert probe.look([ours.pid]) is None  # the first look takes the counters
        time.sleep(2.0)
        load = probe.look([ours.pid])
        kids = [int(p) for p in open(f"/proc/{ours.pid}/task/{ours.pid}/children").read().split()]
    finally:
        for p in (outside, ours):  # each its own session: the group takes ours' busy child with it
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        stand_in.kill()
        stand_in.wait()
    assert load is not None and 1.5 < load.seconds < 10
    named = {o["pid"]: o for o in load.outsiders}
    assert outside.pid in named, load
    o = named[outside.pid]
    assert o["cpu"] >= MIN_CPU and o["user"] == getpass.getuser()
    assert o["name"].startswith("python") and o["cmd"].endswith(f"-c {SPIN}")
    assert ours.pid not in named and not set(kids) & set(named), "the run's own and its descendants"
    assert load.outside_cpu >= o["cpu"] and load.outside_n >= 1
    assert load.iowait is not None and load.swap_bps is not None and load.majfaults is not None
    assert [o["pid"] for o in load.outsiders] == [o["pid"] for o in sorted(load.outsiders, key=lambda x: -x["cpu"])]
    causes, listed = machine.causes(machine.Seen(load=load), None)
    assert listed == load.outsiders
    if load.outside_cpu >= machine.OUTSIDE_CPUS:
        [(kind, text)] = [c for c in causes if c[0] == "outside"]
        assert f"(pid {load.outsiders[0]['pid']}, user " in text and " outside the run take" in text


def test_a_quiet_node_is_no_cause():
    probe = NodeProbe()
    probe.look()
    time.sleep(1.0)
    load = probe.look()
    assert load is not None
    quiet = type(load)(load.seconds, load.cpus, [], 0.0, 0, 0.0, 0.0, 0.0)
    assert machine.causes(machine.Seen(load=quiet, waits=[0.01, 0.02, 0.0]), None) == ([], [])


def test_vmstat_reads_the_counters_it_wants():
    got = vmstat()
    assert set(got) <= {b"pgmajfault", b"pswpin", b"pswpout"} and b"pgmajfault" in got
