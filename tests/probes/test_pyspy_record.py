"""A rank's flame graph through py-spy (`mpwatch.probes.pyspy.record`), on a real process.

A rank that mostly waits (in a sleep, a collective, a read) is the rank whose profile a user asks
for when the others wait on it, or when it waits on them: its flame graph shows where it waits.
py-spy leaves idle threads out by default, and of a process asleep 96% of the time its 2 s held no
sample at all on a loaded machine ("No stack counts found"): a failed profile instead of one."""
from __future__ import annotations

import subprocess
import sys

import pytest

from mpwatch.probes import pyspy

WAITS = """
import time
def waits_for_its_peers():
    time.sleep(120)
print("ready", flush=True)
waits_for_its_peers()
"""


def test_a_process_that_only_waits_gets_a_flame_graph_of_where_it_waits(tmp_path):
    if pyspy.find() is None:
        pytest.skip("py-spy is not installed (the spy extra)")
    proc = subprocess.Popen([sys.executable, "-c", WAITS], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        readable, why = pyspy.dump(proc.pid, nonblocking=True)
        if not readable:
            pytest.skip(f"py-spy cannot read another process here: {why}")
        out = tmp_path / "flame.svg"
        ok, why = pyspy.record(proc.pid, 1, str(out))
        assert ok, why
        svg = out.read_bytes()
        assert svg.startswith((b"<?xml", b"<svg")) and b"waits_for_its_peers" in svg
    finally:
        proc.kill()
        proc.wait()
