"""No orphans even when a worker's child leaves the worker's process group (setsid)."""
import re
import signal

import pytest

from tests.helpers import FIXTURES, alive, assert_gone, wait_for

pytestmark = pytest.mark.timeout(120)


def start(headless):
    run = headless(FIXTURES / "setsid_grandchild.py", n=1, opts=["--grace", "1"])
    m = wait_for(lambda: re.search(r"SETSID (\d+)", run.log(0)),
                 what="the setsid child's pid")
    pid = int(m.group(1))
    # The sampler finds it within a second or two and the supervisor tracks its group.
    wait_for(lambda: pid in run.worker(0)["foreign_groups"], what="the foreign group to be tracked")
    return run, pid


def test_stop_kills_a_child_in_its_own_session(headless):
    run, pid = start(headless)
    worker = run.worker(0)["pid"]
    run.ctl("stop")
    run.wait_exit()
    assert_gone([worker, pid])


def test_sigkilled_supervisor_takes_a_setsid_child_along(headless):
    run, pid = start(headless)
    pids = run.all_pids() | {pid}
    assert alive(pid)
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    assert_gone(pids, timeout=10)
