"""Issue 41: what took the machine, in words (supervisor.diagnose.machine, text.slowdown_text). The
GPUs' clocks held back, read from statuses recorded from real runs (mig: the stand-in NVML holds its
GPU by the power cap; gpu2: full clocks); the ranks short of CPU from the process sampler's run delay
of real processes on a CPU busy processes share, and none for ranks that mostly sleep."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mpwatch.probes.procs import ProcProbe
from mpwatch.supervisor.diagnose import machine, slowness
from tests.tui.recorded import status

SPIN = "while True: pass"


def test_the_clocks_of_every_gpu_held_back_are_a_cause_and_full_clocks_none():
    mig = status("mig")["gpus"]
    held, every = machine.gpus_held(mig, {0})
    assert (held, every) == (["GPU 0: sw power cap (SM clock 1275 of 1410 MHz)"], True)
    causes, _ = machine.causes(machine.Seen(gpus=held, every_gpu=every), None)
    assert causes == [("gpu", "the clocks of every GPU of the run are held back: GPU 0: sw power cap "
                              "(SM clock 1275 of 1410 MHz)")]
    assert machine.gpus_held(status("gpu2")["gpus"], {0, 1}) == ([], False)


@pytest.mark.takes_cpus
@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="the kernel keeps no schedstat")
def test_ranks_sharing_a_cpu_with_busy_processes_are_short_of_cpu_and_sleepers_are_not():
    spin = [subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True) for _ in range(3)]
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"],
                                 start_new_session=True) for _ in range(2)]
    for p in spin:
        os.sched_setaffinity(p.pid, {0})
    probe = ProcProbe()
    try:
        pids = [p.pid for p in spin + sleepers]
        first = time.monotonic()
        infos = probe.sample(pids)
        while time.monotonic() - first < 3.0:
            time.sleep(0.5)
            infos = probe.sample(pids)
    finally:
        for p in spin + sleepers:
            p.kill()
            p.wait()
    starved = [slowness.cpu_wait(infos[p.pid]) or 0.0 for p in spin]
    causes, _ = machine.causes(machine.Seen(waits=starved), None)
    [(kind, text)] = causes
    assert kind == "cpu" and text.startswith("the ranks wait for a CPU ") and text.endswith("% of the time (run delay)")
    idle = [slowness.cpu_wait(infos[p.pid]) or 0.0 for p in sleepers]
    assert machine.causes(machine.Seen(waits=idle), None) == ([], [])


def test_cpus_taken_are_singular_only_where_the_number_shown_is_one():
    """A CI run printed '3 processes outside the run take 0.9 CPU': the float was 0.95, the rule
    looked at the float, the words at its rounding."""
    from mpwatch.text.slowdown_text import outsiders
    one = [{"pid": 7, "user": "ana", "name": "python3", "cmd": "python3", "cpu": 0.5}]
    words = {cpus: outsiders(one, 3, cpus).split(": ")[0] for cpus in (0.5, 0.95, 0.96, 1.0, 1.04, 1.06, 2.0)}
    assert words == {0.5: "3 processes outside the run take 0.5 CPUs",
                     0.95: "3 processes outside the run take 0.9 CPUs",
                     0.96: "3 processes outside the run take 1.0 CPU",
                     1.0: "3 processes outside the run take 1.0 CPU",
                     1.04: "3 processes outside the run take 1.0 CPU",
                     1.06: "3 processes outside the run take 1.1 CPUs",
                     2.0: "3 processes outside the run take 2.0 CPUs"}
