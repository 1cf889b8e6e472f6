"""Issue 32: what slows a rank's process, as the supervisor sees it. The process sampler's
cpu_wait (the kernel's run delay of a process's main thread, /proc/PID/schedstat) read from real
processes: one that computes on a CPU two busy processes share with it waits for the CPU most of
the time, one that sleeps hardly ever; supervisor.diagnose.slowness names the first short of CPU,
and on a machine where every rank waits as long, none."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mpwatch.probes.procs import ProcProbe
from mpwatch.supervisor.diagnose import slowness

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="the kernel keeps no schedstat")

SPIN = "while True: pass"


def started(code: str, cpu: int | None = None) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    if cpu is not None:
        os.sched_setaffinity(p.pid, {cpu})
    return p


@pytest.mark.takes_cpus
def test_a_process_sharing_its_cpu_with_busy_ones_waits_for_it_and_is_named_short_of_cpu():
    procs = [started(SPIN, 0) for _ in range(3)]  # the probed one and two busy ones, on CPU 0
    sleeper = started("import time\nwhile True: time.sleep(0.05)")
    probe = ProcProbe()
    try:
        pids = [procs[0].pid, sleeper.pid]
        first = time.monotonic()
        infos = probe.sample(pids)
        while time.monotonic() - first < 3.0:  # cpu_wait over its samples of these seconds
            time.sleep(0.5)
            infos = probe.sample(pids)
    finally:
        for p in [*procs, sleeper]:
            p.kill()
            p.wait()
    starved, idle = infos[procs[0].pid], infos[sleeper.pid]
    assert starved["cpu_wait"] >= 0.5, starved  # at most a third of CPU 0 is its
    assert idle["cpu_wait"] < 0.2, idle
    node = slowness.Node.now({0: starved, 1: idle})
    assert node.why(0, starved).startswith(f"short of CPU: ready to run but without a CPU {starved['cpu_wait']:.0%} "
                                           f"of the time (CPU {starved['cpu_percent']:.0f}%, load ")
    assert node.why(1, idle) is None


def test_every_rank_waiting_as_long_is_none_short_of_cpu_more_than_another():
    infos = {r: {"cpu_wait": w, "cpu_percent": 20.0} for r, w in enumerate((0.42, 0.45, 0.40))}
    node = slowness.Node(load=16.0, cpus=2, peers=slowness.peers_wait(infos))
    assert [node.why(r, i) for r, i in infos.items()] == [None, None, None]
    infos[1]["cpu_wait"] = 0.8  # one of them far more
    node = slowness.Node(load=16.0, cpus=2, peers=slowness.peers_wait(infos))
    assert [node.why(r, i) is not None for r, i in infos.items()] == [False, True, False]
