"""The control socket under bad input: no key, a wrong key, garbage after the handshake,
commands for ranks that do not exist. Each is refused with a reason; the run is unaffected."""
import json
import os
import socket
import struct
from multiprocessing.connection import AuthenticationError
from multiprocessing.connection import Client as Connect

import pytest

from mpwatch.contract import protocol
from tests.faults.conftest import FAULTS, control, reporting
from tests.helpers import mpwatch, wait_for

pytestmark = pytest.mark.timeout(120)


def ask(conn, payload: bytes) -> dict:
    conn.send_bytes(payload)
    assert conn.poll(30), "no reply"
    return json.loads(conn.recv_bytes())


REFUSED = [
    # (request bytes, words the refusal must contain)
    (b"\xff\xfe not json", "bad request: not JSON"),
    (b"[" * 200_000, "bad request: not JSON"),
    (b"[1, 2]", "bad request"),
    (b'{"cmd": 5}', "bad request"),
    (b'{"cmd": "selfdestruct"}', "unknown command 'selfdestruct'"),
    (b'{"cmd": "pause", "target": 7}', "no rank 7 in this run (ranks: 0-1)"),
    (b'{"cmd": "kill", "target": -1}', "no rank -1"),
    (b'{"cmd": "restart", "target": "zero"}', "rank must be an integer"),
    (b'{"cmd": "dump", "target": true}', "rank must be an integer"),
    (b'{"cmd": "pause", "target": null}', "rank must be an integer"),
    (b'{"cmd": "resume", "target": 0}', "rank 0 is not paused"),
    (b'{"cmd": "history", "rank": 99}', "no rank 99"),
    (b'{"cmd": "logs", "rank": 0, "stream": "/etc/shadow"}', "stream must be stdout or stderr"),
    (b'{"cmd": "logs", "rank": 0, "lines": -5}', "lines must be a positive integer"),
    (b'{"cmd": "events", "since": "x"}', "'since' must be an integer"),
    (b'{"cmd": "resize", "n": 0}', "at least 1"),
    (b'{"cmd": "resize", "n": "2"}', "at least 1"),
    (b'{"cmd": "resize", "n": 2}', "already has 2 workers"),
    (b'{"cmd": "gpu_timeline", "window": 0}', "'window' must be a number of seconds from 1 to 3600"),
]


def test_garbage_and_impossible_commands_are_refused_with_a_reason(headless):
    run = headless(FAULTS / "steady.py", n=2)
    before = wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    key = bytes.fromhex(control(run)["authkey"])
    conn = Connect(control(run)["address"], family="AF_UNIX", authkey=key)
    for payload, reason in REFUSED:
        reply = ask(conn, payload)
        assert reply["ok"] is False and reason in reply["error"], (payload[:40], reply)
        assert "Traceback" not in reply["error"]
        # the same connection still works after every refusal
        assert ask(conn, b'{"cmd": "status"}')["ok"] is True
    # an oversized request ends that connection only
    os.write(conn.fileno(), struct.pack("!i", protocol.MAX_FRAME + 1) + b"x" * 64)
    with pytest.raises((EOFError, OSError)):
        conn.poll(30) and conn.recv_bytes()
        conn.send_bytes(b'{"cmd": "status"}')
        conn.recv_bytes()
    # the CLI says the same in one line
    res = mpwatch("ctl", "--run", run.run_dir, "pause", "5")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == "mpwatch: error: no rank 5 in this run (ranks: 0-1)\n"
    after = run.status()
    assert [w["pid"] for w in after["workers"]] == [w["pid"] for w in before["workers"]]
    assert all(w["state"] == "running" for w in after["workers"])
    assert not run.events("paused") and not run.events("stopping")
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone()


def test_unauthenticated_and_wrong_key_connections_get_nothing(headless):
    run = headless(FAULTS / "steady.py", n=1)
    wait_for(lambda: reporting(run, 1), what="rank 0 reporting")
    address = control(run)["address"]
    refused0 = run.status()["run"]["refused_connections"]
    # a wrong key
    with pytest.raises(AuthenticationError):
        Connect(address, family="AF_UNIX", authkey=b"not the key")
    # no handshake at all: a request sent blind is never answered with data
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(address)
        s.settimeout(30)
        req = protocol.encode({"cmd": "stop"})
        s.sendall(struct.pack("!i", len(req)) + req)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        assert b"#CHALLENGE#" in got and b"workers" not in got and b"ok" not in got
    wait_for(lambda: run.status()["run"]["refused_connections"] == refused0 + 2, what="two refusals")
    # silent connections that never finish the handshake hold up nobody
    silent = [socket.socket(socket.AF_UNIX) for _ in range(40)]
    try:
        for s in silent:
            s.connect(address)
        st = run.status()  # answered: a server held up by them would fail the client's own timeout
    finally:
        for s in silent:
            s.close()
    assert st["workers"][0]["state"] == "running" and not run.events("stopping")
    assert run.proc.poll() is None
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone()
