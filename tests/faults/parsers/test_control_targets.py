"""Issue 39, item 10: a control request's target is a rank's number in ASCII digits, or "all";
anything else ('²', which str.isdigit() takes and int() refuses; '٣', which int() reads as 3;
5,000 digits) is refused in one line, "rank must be an integer", on a live run: never an
"internal error", and the run is untouched (the suite's fixture finds no bug in supervisor.log)."""
from __future__ import annotations

import json
from multiprocessing.connection import Client as Connect

import pytest

from tests.faults.conftest import FAULTS, control, reporting
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)
TARGETS = ["²", "٣", "1²", "9" * 5000, " 1", "+1", "-0", "0x1", "", "1_0"]
COMMANDS = ["pause", "dump", "profile", "memory", "checkpoint"]


def ask(conn, req: dict) -> dict:
    conn.send_bytes(json.dumps(req).encode())
    assert conn.poll(30), "no reply"
    return json.loads(conn.recv_bytes())


def test_a_target_that_is_no_ascii_number_is_refused_in_one_line(headless):
    run = headless(FAULTS / "steady.py", n=2)
    before = wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    ctl = control(run)
    conn = Connect(ctl["address"], family="AF_UNIX", authkey=bytes.fromhex(ctl["authkey"]))
    try:
        for cmd in COMMANDS:
            for target in TARGETS:
                reply = ask(conn, {"cmd": cmd, "target": target})
                assert reply == {"ok": False, "error": "rank must be an integer"}, (cmd, target[:20], reply)
        reply = ask(conn, {"cmd": "dump", "target": "1"})  # ASCII digits as text are a rank still
        assert reply["ok"] is True, reply
    finally:
        conn.close()
    after = run.status()
    assert [(w["pid"], w["state"]) for w in after["workers"]] == [(w["pid"], "running")
                                                                  for w in before["workers"]]
    assert not run.events("paused") and not run.events("profile_requested")
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
