"""Private AF_UNIX listeners and the authkey handshake: the base of the channel hub and of
the control server. Both must refuse anyone without the run's key, and neither may let a
silent peer hold a thread forever.

Threads: one accept thread per listener; each connection proves the key on a short-lived
thread of its own, then `_serve()` runs there (the hub hands it to its reader instead).
"""
from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from typing import Generic, TypeVar

HANDSHAKE_S = 5.0

T = TypeVar("T")


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


def authenticate(s: socket.socket, authkey: bytes,
                 first: Callable[[Connection], T] | None = None) -> tuple[Connection, T | None]:
    """Prove the key both ways (multiprocessing's HMAC challenge) within HANDSHAKE_S.
    `first(conn)`, if given, runs inside the same deadline (the hub reads the hello there).
    Returns (conn, first's result); raises Refused after closing the connection."""
    waker = s.dup()  # the same socket: shutting it down ends a read blocked on conn
    conn = Connection(s.detach())
    cut = _Cutoff(waker)
    timer = threading.Timer(HANDSHAKE_S, cut.fire)  # a silent peer is cut off, its thread freed
    timer.start()
    try:
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
        result = first(conn) if first is not None else None
        if not cut.disarm():
            raise EOFError("the handshake took too long")
    except (AuthenticationError, OSError, EOFError, ValueError, TypeError) as exc:
        try:
            conn.close()
        except OSError:
            pass
        raise Refused(str(exc) or type(exc).__name__) from None
    finally:
        timer.cancel()
        waker.close()
    return conn, result


class _Cutoff:
    """The handshake's deadline: `fire` shuts the socket down (closing the fd alone would
    leave the thread that reads it blocked for as long as the peer keeps it open), unless
    the handshake was done first (`disarm`)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.lock = threading.Lock()
        self.state: bool | None = None  # None: running; True: done in time; False: cut off

    def fire(self) -> None:
        with self.lock:
            if self.state is not None:
                return
            self.state = False
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def disarm(self) -> bool:
        """True when the handshake ended before its deadline (then it never fires)."""
        with self.lock:
            if self.state is None:
                self.state = True
            return self.state


class Listener(Generic[T]):
    """Listens at `address` from `start()` on; each connection that proves the key (and,
    for the hub, sends a hello that `_first` reads) goes to `_serve`; the others are
    counted in `refused`."""

    thread_name = "mpwatch-listener"

    def __init__(self, address: str, authkey: bytes, backlog: int):
        self.address = address
        self.authkey = authkey
        self.backlog = backlog
        self.sock: socket.socket | None = None  # bound by start()
        self.refused = 0
        self._refused_lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        """Bind (a client may connect as soon as this returns) and start accepting."""
        sock = self.sock = listen_private(self.address, self.backlog)
        threading.Thread(target=self._accept_loop, args=(sock,), name=self.thread_name, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        if self.sock is None:  # never bound: the address is not ours to remove
            return
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.unlink(self.address)
        except OSError:
            pass

    def _accept_loop(self, sock: socket.socket) -> None:
        while not self._closed:
            try:
                s, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._accepted, args=(s,), name=f"{self.thread_name}-peer",
                             daemon=True).start()

    def _accepted(self, s: socket.socket) -> None:
        try:
            conn, first = authenticate(s, self.authkey, self._first)
        except Refused:
            with self._refused_lock:
                self.refused += 1
            return
        self._serve(conn, first)

    def _first(self, conn: Connection) -> T | None:
        """Read inside the handshake's deadline (nothing by default)."""
        return None

    def _serve(self, conn: Connection, first: T | None) -> None:
        raise NotImplementedError
