"""The bridge's ids (issue 30, item 13): a request whose `id` no reply could carry (a list nested
up to 1000 deep, an object), with or without a `cmd`, is answered all the same, its id sent
back as none (one nested past contract.jsonread.MAX_DEPTH is refused as no JSON it reads, issue
39); no traceback reaches the bridge's stderr, and the bridge goes on answering."""
from __future__ import annotations

import json

import pytest

from tests.faults.conftest import FAULTS, reporting
from tests.faults.test_hostile_wire import Bridge, nested
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)

# Around the interpreter's recursion limit: 990 decoded, then failed to encode (no reply).
DEPTHS = range(900, 1001, 5)


def test_every_request_gets_a_reply_whatever_its_id(headless):
    run = headless(FAULTS / "steady.py", n=1, opts=["--grace", "1"])
    wait_for(lambda: reporting(run, 1, 0), 60, what="rank 0 running")
    b = Bridge(run.run_dir)
    try:
        for depth in DEPTHS:  # no cmd
            b.send(b'{"id": ' + nested(depth) + b"}\n")
            line = b.recv_line()
            assert line.startswith(b'{"id":null,'), (depth, line[:80])
            reply = json.loads(line)["reply"]
            assert reply["ok"] is False, reply
            assert "no cmd" in reply["error"] or "not JSON" in reply["error"], reply
        b.send(b'{"id": {"a": ' + nested(950) + b'}, "cmd": "status", "tail": 1}\n')
        got = json.loads(b.recv_line())
        assert got["id"] is None and "nested deeper than 64" in got["reply"]["error"], got
        b.send(b'{"id": {"a": ' + nested(60) + b'}, "cmd": "status", "tail": 1}\n')
        got = json.loads(b.recv_line())
        assert got["id"] is None and got["reply"]["ok"] and got["reply"]["status"]["workers"][0]["rank"] == 0
        b.send({"id": [1, 2], "cmd": 7})
        no_cmd = {"id": None, "reply": {"ok": False, "error": "bad request: no cmd"}}
        assert json.loads(b.recv_line()) == no_cmd
        b.send({"id": 9, "cmd": "status", "tail": 1})  # it goes on, and a plain id comes back
        after = json.loads(b.recv_line())
        assert after["id"] == 9 and after["reply"]["ok"]
        b.proc.stdin.close()
        assert b.proc.wait(30) == 0
        err = b.proc.stderr.read().decode()
        assert "Traceback" not in err and "RecursionError" not in err, err
    finally:
        b.close()
