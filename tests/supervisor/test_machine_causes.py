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
