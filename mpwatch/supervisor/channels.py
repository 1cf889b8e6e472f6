"""The channel hub: one AF_UNIX listener, one authenticated `Connection` per process.

Each connection proves the run's authkey (multiprocessing's HMAC challenge, both ways)
on a short-lived thread, so a silent or hostile peer cannot hold up the others. One
reader thread then waits on every connection with `multiprocessing.connection.wait`
and hands decoded frames to the run. A frame that does not decode is counted and
dropped; an oversized frame desynchronises the stream, so that connection is closed
(the worker reconnects on its next batch).
"""
from __future__ import annotations

import os
import socket
import threading
from multiprocessing.connection import (AuthenticationError, Connection, answer_challenge,
                                        deliver_challenge, wait)

from mpwatch import protocol

HANDSHAKE_S = 5.0


class Peer:
    __slots__ = ("conn", "rank", "pid", "bad_frames")

    def __init__(self, conn, rank, pid):
        self.conn = conn
        self.rank = rank
        self.pid = pid
        self.bad_frames = 0


class ChannelHub:
    """Calls back into the run: on_hello(peer, msg), on_frame(peer, msg), on_bad(peer|None, why),
    on_close(peer). Callbacks run on the hub's threads and must be quick."""

    def __init__(self, address: str, authkey: bytes, handler):
        self.address = address
        self.authkey = authkey
        self.handler = handler
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(address)
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            self.sock.bind(address)
        finally:
            os.umask(old)
        self.sock.listen(512)
        self._peers: list[Peer] = []
        self._new: list[Peer] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = False
        self.refused = 0

    def start(self):
        threading.Thread(target=self._accept_loop, name="mpwatch-accept", daemon=True).start()
        threading.Thread(target=self._read_loop, name="mpwatch-reader", daemon=True).start()

    def close(self):
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.unlink(self.address)
        except OSError:
            pass
        self._wake_w.send(b"x")

    # -- accepting -----------------------------------------------------------------
    def _accept_loop(self):
        while not self._closed:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(s,), daemon=True).start()

    def _handshake(self, s: socket.socket):
        conn = Connection(s.detach())
        timer = threading.Timer(HANDSHAKE_S, conn.close)
        timer.start()
        try:
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
            hello = protocol.decode(conn.recv_bytes(protocol.MAX_FRAME))
            if hello.get("t") != protocol.HELLO:
                raise protocol.BadFrame("first frame is not hello")
            rank, pid = hello.get("rank"), hello.get("pid")
            if not isinstance(rank, int) or not isinstance(pid, int):
                raise protocol.BadFrame("hello without rank and pid")
        except (AuthenticationError, protocol.BadFrame, OSError, EOFError, TypeError) as exc:
            timer.cancel()
            self.refused += 1
            self.handler.on_refused(str(exc) or type(exc).__name__)
            try:
                conn.close()
            except OSError:
                pass
            return
        timer.cancel()
        peer = Peer(conn, rank, pid)
        self.handler.on_hello(peer, hello)
        with self._lock:
            self._new.append(peer)
        self._wake_w.send(b"x")

    # -- reading -------------------------------------------------------------------
    def _read_loop(self):
        by_conn: dict = {}
        while not self._closed:
            with self._lock:
                for p in self._new:
                    by_conn[p.conn] = p
                self._new.clear()
            try:
                ready = wait(list(by_conn) + [self._wake_r], timeout=1.0)
            except OSError:
                ready = []
            for obj in ready:
                if obj is self._wake_r:
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                    continue
                peer = by_conn[obj]
                if not self._read_one(peer):
                    del by_conn[obj]
                    try:
                        obj.close()
                    except OSError:
                        pass
                    self.handler.on_close(peer)
        for conn in by_conn:
            try:
                conn.close()
            except OSError:
                pass

    def _read_one(self, peer: Peer) -> bool:
        try:
            data = peer.conn.recv_bytes(protocol.MAX_FRAME)
        except EOFError:
            return False
        except OSError as exc:  # "bad message length": oversized or corrupt header
            peer.bad_frames += 1
            self.handler.on_bad(peer, f"unreadable frame ({exc})")
            return False
        try:
            msg = protocol.decode(data)
            self.handler.on_frame(peer, msg)
        except protocol.BadFrame as exc:
            peer.bad_frames += 1
            self.handler.on_bad(peer, str(exc))
        return True
