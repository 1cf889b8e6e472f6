"""Private AF_UNIX listeners and the authkey handshake, shared by the channel hub and the
control server: both must refuse anyone without the run's key, and neither may let a
silent peer hold a thread forever."""
from __future__ import annotations

import os
import socket
import threading
from multiprocessing.connection import AuthenticationError, Connection, answer_challenge, deliver_challenge

HANDSHAKE_S = 5.0


class Refused(Exception):
    """A peer that failed the handshake; the message says why."""


def listen_private(address: str, backlog: int) -> socket.socket:
    """A listening socket at `address`, created 0600 (bound under a 0177 umask)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(address)
    except FileNotFoundError:
        pass
    old = os.umask(0o177)
    try:
        sock.bind(address)
    finally:
        os.umask(old)
    sock.listen(backlog)
    return sock


def authenticate(s: socket.socket, authkey: bytes, first=None):
    """Prove the key both ways (multiprocessing's HMAC challenge) within HANDSHAKE_S.
    `first(conn)`, if given, runs inside the same deadline (the hub reads the hello there).
    Returns (conn, first's result); raises Refused after closing the connection."""
    conn = Connection(s.detach())
    timer = threading.Timer(HANDSHAKE_S, conn.close)  # a silent peer is cut off
    timer.start()
    try:
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
        result = first(conn) if first is not None else None
    except (AuthenticationError, OSError, EOFError, ValueError, TypeError) as exc:
        try:
            conn.close()
        except OSError:
            pass
        raise Refused(str(exc) or type(exc).__name__) from None
    finally:
        timer.cancel()
    return conn, result
