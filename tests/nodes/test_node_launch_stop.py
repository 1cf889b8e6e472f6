"""A multi-node run's launch is cancelled as a single-node one is (issue 30, item 1): each
node starts its round's ranks a few a tick through the run's launch queue (supervisor.resize),
so `ctl stop` on one node and SIGTERM on the other stop a launch in progress at once. Two
supervisors as two nodes at 256 ranks each (/bin/sleep workers, cheap to fork: the old code's
loop started all of a node's ranks before it read the stop) are frozen (SIGSTOP) as soon as
each has its first workers, stopped, thawed: each starts at most a tick's batch or so more, and
every process of both runs is gone, checked over the whole process table with psutil."""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.faults.test_hostile_launch import SLACK, _stop
from tests.helpers import need

need("torch", "several nodes meet in torch's rendezvous (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]

WIDE = 256  # ranks a node (MPWATCH_MAX_WORKERS)
SCRIPT = ("/bin/sleep", "600")


def _workers(sup: int) -> int:
    """The supervisor's workers now: its children running the script (not its watchdog, nor a
    child between its fork and its exec)."""
    n = 0
    try:
        children = psutil.Process(sup).children()
    except psutil.Error:
        return 0
    for c in children:
        try:
            n += c.cmdline() == [*SCRIPT]
        except psutil.Error:
            continue
    return n


def _freeze_both_mid_launch(runs) -> list[int]:
    """Freeze each node's supervisor as soon as it has its first workers (the round formed and
    its launch began); the workers each had then."""
    before: dict[int, int] = {}
    deadline = time.monotonic() + 120
    while len(before) < len(runs):
        for i, run in enumerate(runs):
            if i in before:
                continue
            assert run.proc.poll() is None, f"node {i}'s supervisor ended: {run.stderr_text[-2000:]}"
            if _workers(run.proc.pid):
                os.kill(run.proc.pid, signal.SIGSTOP)
                before[i] = _workers(run.proc.pid)
        waiting = set(range(len(runs))) - set(before)
        assert time.monotonic() < deadline, f"no round's launch began on nodes {waiting}"
        time.sleep(0.002)
    return [before[i] for i in range(len(runs))]


def test_a_two_node_launch_is_cancelled_by_ctl_stop_and_sigterm(two_nodes):
    env = dict(os.environ, MPWATCH_MAX_WORKERS=str(WIDE))
    runs = two_nodes(*SCRIPT, backend="static", n=(WIDE, WIDE),
                     opts=["--no-python", "--grace", "1"], env=env)
    before = _freeze_both_mid_launch(runs)
    assert all(b + SLACK < WIDE for b in before), f"a node had nearly all its ranks when frozen: {before}"
    try:
        ctl = _stop("ctl", runs[0].proc.pid, runs[0].run_dir)
        _stop("SIGTERM", runs[1].proc.pid, runs[1].run_dir)
    finally:
        for run in runs:
            os.kill(run.proc.pid, signal.SIGCONT)
    assert ctl is not None
    _, err = ctl.communicate(timeout=60)
    assert ctl.returncode == 0, err
    for run, frozen_with in zip(runs, before, strict=True):
        assert run.wait_exit(120) == 1
        started = run.events("worker_started")
        assert len(started) <= frozen_with + SLACK, \
            f"{len(started)} of {WIDE} ranks started on {run.run_dir}; {frozen_with} were when it was stopped"
        assert run.events("stopping")
        run.assert_gone()
