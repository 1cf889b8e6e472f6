"""The other direction of the control socket's key (docs/reliability.md: every connection proves
the key "in both directions before a single frame is read"): `ctl` and the TUI's client refuse a
server at the run's address that cannot prove the key, and send it no request. Two impostors on
a real Unix socket: one that waves the client's proof through and cannot answer the client's own
challenge, and an honest server that holds another key."""
from __future__ import annotations

import json
import os
import threading
from multiprocessing import AuthenticationError, connection
from multiprocessing.connection import Listener
from pathlib import Path

import pytest

from mpwatch.rundir.registry import RunHandle
from mpwatch.sources.local import Client, ClientError

pytestmark = pytest.mark.timeout(60)
KEY = os.urandom(32)
# multiprocessing's handshake words (public names up to Python 3.11, private from 3.12)
CHALLENGE, WELCOME, FAILURE = (getattr(connection, n, None) or getattr(connection, "_" + n)
                               for n in ("CHALLENGE", "WELCOME", "FAILURE"))


def handle(tmp_path: Path, address: str) -> RunHandle:
    """What registry.resolve gives for a run whose control.json holds KEY and the address."""
    return RunHandle(run_id="run-x", run_dir=tmp_path, address=address, authkey=KEY, pid=os.getpid())


def serve_once(address: str, play) -> tuple[threading.Thread, list]:
    """A listener at `address` that plays `play(conn, heard)` with its one client, then keeps every
    frame the client still sends until it hangs up."""
    listener = Listener(address, family="AF_UNIX")  # no authkey: the handshake is the play's
    heard: list = []

    def run():
        with listener, listener.accept() as conn:
            try:
                play(conn, heard)
                while True:
                    heard.append(conn.recv_bytes())
            except (EOFError, OSError):
                heard.append("EOF")
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, heard


def waves_through(conn, heard) -> None:
    """Knows no key: asks the client to prove it, takes any answer as proof, then cannot answer
    the client's challenge."""
    conn.send_bytes(CHALLENGE + os.urandom(20))
    heard.append(("the client's proof", conn.recv_bytes(256)))
    conn.send_bytes(WELCOME)
    heard.append(("the client's challenge", conn.recv_bytes(256)))
    conn.send_bytes(os.urandom(16))  # no HMAC of it: it has no key


def another_key(conn, heard) -> None:
    """An honest server of another run: its own key's challenge, which the client's proof fails."""
    try:
        connection.deliver_challenge(conn, os.urandom(32))
    except AuthenticationError:
        heard.append(("refused the client", b""))


@pytest.mark.parametrize("play", [waves_through, another_key], ids=["waves-through", "another-key"])
def test_the_client_refuses_a_server_that_cannot_prove_the_key(tmp_path, play):
    address = str(tmp_path / "control.sock")
    t, heard = serve_once(address, play)
    with pytest.raises(ClientError, match=r"^run run-x refused the connection: wrong key$"):
        Client(handle(tmp_path, address))
    t.join(30)
    assert not t.is_alive()
    # the client hung up without a request: after the handshake's frames, only its own
    # "failure" (when it was the one to refuse), then the end
    after = [f for f in heard if not isinstance(f, tuple)]
    assert after[-1] == "EOF" and all(f in (FAILURE, "EOF") for f in after), heard
    if play is waves_through:
        assert heard[1][0] == "the client's challenge" and after == [FAILURE, "EOF"], heard


def test_a_server_with_the_key_is_answered(tmp_path):
    """The same handshake with a server that holds the key: the client connects and asks."""
    address = str(tmp_path / "control.sock")

    def proves(conn, heard):
        connection.deliver_challenge(conn, KEY)
        connection.answer_challenge(conn, KEY)
        heard.append(("request", conn.recv_bytes()))
        conn.send_bytes(b'{"ok": true, "message": "stopping"}')
    t, heard = serve_once(address, proves)
    with Client(handle(tmp_path, address)) as client:
        assert client.stop() == "stopping"
    t.join(30)
    assert heard[0][0] == "request" and json.loads(heard[0][1]) == {"cmd": "stop"}, heard
