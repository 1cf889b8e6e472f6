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


def test_a_new_descendant_is_found_at_the_first_sample_past_the_scans_age():
    """The process table is scanned for new descendants when its last scan is `tree_s` old (the
    sampler's: procs.TREE_S up to 128 workers, every other 4 s look past them); between scans a
    child born since is not seen, at the first sample after it is. A real parent and child."""
    from mpwatch.probes import procs
    from mpwatch.supervisor.diagnose import sampler

    assert sampler.tree_s(128) == procs.TREE_S == 2.0 and sampler.interval(128) == 2.0
    assert sampler.interval(256) == 4.0 and 4.0 < sampler.tree_s(256) <= 8.0  # the scan at every other look
    probe = ProcProbe()
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys\nsys.stdin.readline()\n"
                               "c = subprocess.Popen(['sleep', '60'])\nprint(c.pid, flush=True)\nsys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert probe.sample([parent.pid], tree_s=3600)[parent.pid]["children"] == []  # the scan, made now
        assert parent.stdin is not None and parent.stdout is not None
        parent.stdin.write("go\n")
        parent.stdin.flush()
        child = int(parent.stdout.readline())
        assert probe.sample([parent.pid], tree_s=3600)[parent.pid]["children"] == []  # the scan is young
        kids = probe.sample([parent.pid], tree_s=0)[parent.pid]["children"]  # it is old enough: a new one
        assert [c["pid"] for c in kids] == [child] and kids[0]["ppid"] == parent.pid
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()
