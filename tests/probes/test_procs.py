"""The process probe never reads a false 0 (issue 31): a rank's process that has ended but is
not reaped yet (a zombie; its row still says running while the supervisor drains its
channel, as after a stop) reads a resident size of 0, and RSS showed 0B. Its last size read
stands for it. A real process."""
from __future__ import annotations

import subprocess
import sys

import psutil

from mpwatch.probes.procs import ProcProbe
from tests.helpers import wait_for


def test_a_zombie_keeps_its_last_resident_size():
    probe = ProcProbe()
    proc = subprocess.Popen([sys.executable, "-c",
                             "import sys; x = bytearray(64 << 20); sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        live = wait_for(lambda: (lambda i: i if i and (i["rss_bytes"] or 0) > 64 << 20 else None)(
            probe.sample([proc.pid]).get(proc.pid)), 30, what="its 64 MiB resident")
        assert proc.stdin is not None
        proc.stdin.close()  # it ends; not reaped (no wait), it stays a zombie
        wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, 30, what="a zombie")
        assert psutil.Process(proc.pid).memory_info().rss == 0  # what the kernel says of a zombie
        dead = probe.sample([proc.pid])[proc.pid]
        assert dead["status"] == "zombie" and dead["rss_bytes"] == live["rss_bytes"], dead
    finally:
        proc.wait()
    assert probe.sample([proc.pid]) == {} and not probe._rss  # reaped: forgotten
