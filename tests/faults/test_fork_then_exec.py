"""A GPU process first seen between its fork and its exec (issue 39, item 11) had its parent's
command for life: the labels were kept by the process's creation time, which exec keeps. A real
process held there (a child that forks and execs only once told, through a pipe) is labelled
with its parent's command, then, once it has exec'd, with its own: no race, no sleep."""
from __future__ import annotations

import subprocess
import sys

import pytest

from mpwatch.supervisor.gpu.labels import ProcessLabeler
from tests.helpers import wait_for

HOLDER = """
import os, sys
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)  # held here, between fork and exec, until told
    os.execvp("sleep", ["sleep", "60"])
os.close(r)
print(pid, flush=True)
sys.stdin.readline()
os.write(w, b"x")
os.waitpid(pid, 0)
"""


@pytest.fixture
def holder():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, "held"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    child = int(proc.stdout.readline())
    yield proc, child
    subprocess.run(["kill", "-9", str(child)], capture_output=True)
    proc.kill()
    proc.wait()


def cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")[:-1]


def test_a_process_seen_before_its_exec_gets_its_own_command_after(holder):
    proc, child = holder
    labels = ProcessLabeler()
    labels.refresh([child], worker_pids=[])
    assert "import os, sys" in labels.label(child, 1, {}, {})["cmd"]  # its parent's, for now
    proc.stdin.write("go\n")
    proc.stdin.flush()
    wait_for(lambda: cmdline(child) == ["sleep", "60"], what="the child's exec")
    labels.refresh([child], worker_pids=[])
    assert labels.label(child, 1, {}, {})["cmd"] == "sleep 60"
