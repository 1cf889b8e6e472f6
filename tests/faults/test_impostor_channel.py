"""A channel's rank and pid are the ones mpwatch launched on it (issue 39, item 9): a hello that
names another rank, or a pid that is not the process that connected, is refused (its connection
closed, counted in refused_connections) and said: a `channel_refused` event, and a note on the
rank whose process it was. Before, rank 1 saying hello as rank 0 was taken: a sleeping rank 0 was
shown stepping."""
from __future__ import annotations

import os
from multiprocessing.connection import Client

import pytest

from mpwatch.contract import protocol
from tests.faults.conftest import FAULTS, control
from tests.faults.lend import chan_address
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


def outsider(run, pid: int) -> bool:
    """This test's process (no process of the run) says hello as rank 0 with `pid`: still open after?"""
    conn = Client(chan_address(run), family="AF_UNIX", authkey=bytes.fromhex(control(run)["authkey"]))
    try:
        conn.send_bytes(protocol.encode({"t": "hello", "v": 3, "rank": 0, "pid": pid, "ppid": 1}))
        conn.send_bytes(protocol.encode({"t": "batch", "dropped": 0, "reports": [[1.0, 2000000, 0.0, {}]]}))
        return not conn.poll(2.0)
    except (EOFError, OSError):
        return False
    finally:
        conn.close()


def test_a_hello_for_another_rank_or_pid_is_refused_and_said(headless, tmp_path):
    go = tmp_path / "go"
    run = headless(FAULTS / "impostor.py", go, n=2)
    wait_for(lambda: run.worker(0)["step"] == 2 and (run.worker(1)["step"] or 0) >= 5, what="both ranks reporting")
    pid0 = run.worker(0)["pid"]
    refused0 = run.status()["run"]["refused_connections"]
    go.write_text("")
    wait_for(lambda: run.log(1).count("IMPOSTOR") == 2, what="rank 1's two impostor channels")
    assert "IMPOSTOR its-pid refused" in run.log(1) and "IMPOSTOR own-pid refused" in run.log(1)
    assert not outsider(run, pid0) and not outsider(run, os.getpid())
    said = run.wait_event("channel_refused", count=4)
    assert [(e["rank"], e["count"]) for e in said] == [(0, 1), (0, 2), (0, 3), (0, 4)], said
    whys = [e["why"] for e in said]
    pid1 = run.worker(1)["pid"]
    assert whys[0] == f"its hello says pid {pid0}, the process that connected is {pid1}", whys
    assert whys[1] == f"pid {pid1} is no process of rank 0", whys
    assert whys[2].startswith(f"its hello says pid {pid0}, the process that connected is ")
    assert whys[3] == f"pid {os.getpid()} is no process of rank 0", whys
    st = run.status()
    w = {x["rank"]: x for x in st["workers"]}
    assert w[0]["step"] == 2 and w[0]["state"] == "running"  # never the impostors' step
    assert w[1]["bad_inputs"]["count"] == 2, w[1]  # noted on the rank whose process it was
    assert w[1]["bad_inputs"]["why"].startswith(f"a channel of its claimed rank 0 (pid {pid1}), refused: pid")
    assert "bad_inputs" not in w[0]  # the outsider is no process of the run: said, noted nowhere
    assert st["run"]["refused_connections"] == refused0 + 4
    assert "2 bad inputs: a channel of its claimed rank 0" in run.ctl("status").stdout
    s1 = w[1]["step"]
    wait_for(lambda: run.worker(1)["step"] >= s1 + 10, what="rank 1 reporting on")
    run.ctl("stop")
    assert run.wait_exit(60) == 1
    run.assert_gone()
