"""A control reply that cannot be encoded (a bug of the supervisor's, never a client's) is answered
with the bug's line, and the client keeps its connection: the thread that served it used to die of
it and close the connection unsaid ("lost the connection to run ... (it may have finished)"). A
reply whose keys JSON has no room for (a tuple) is sent with them as text. A real control server
on a real socket, with the run's key."""
from __future__ import annotations

import os
from multiprocessing.connection import Client

import pytest

from mpwatch.contract import protocol
from mpwatch.supervisor.ipc.ctl_server import CtlServer

pytestmark = pytest.mark.injects_bugs  # the unencodable reply is logged as a bug


class Wordless:
    def __str__(self) -> str:
        raise RuntimeError("no words for it")


def test_an_unencodable_reply_is_an_error_reply_and_the_connection_stays(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (a bug's traceback goes to the run's log: here, none is open)
    replies = {"wordless": {"ok": True, "x": Wordless()}, "tuple": {"ok": True, "by": {(1, 2): 3}},
               "plain": {"ok": True, "n": 1}}
    key = os.urandom(16)
    server = CtlServer(str(tmp_path / "ctl.sock"), key, lambda req: replies[req["cmd"]])
    server.start()
    try:
        with Client(str(tmp_path / "ctl.sock"), authkey=key) as conn:
            def ask(cmd: str) -> dict:
                conn.send_bytes(protocol.encode({"cmd": cmd}))
                assert conn.poll(10), f"no reply to {cmd}"
                return protocol.loads(conn.recv_bytes())
            bad = ask("wordless")
            assert bad["ok"] is False and "RuntimeError: no words for it" in bad["error"], bad
            assert ask("tuple") == {"ok": True, "by": {"(1, 2)": 3}}
            assert ask("plain") == {"ok": True, "n": 1}  # the same connection, still served
    finally:
        server.close()
