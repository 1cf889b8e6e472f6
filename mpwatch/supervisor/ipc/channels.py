"""The channel hub: one AF_UNIX listener, one authenticated `Connection` per process.

Each connection proves the run's authkey (multiprocessing's HMAC challenge, both ways)
on a short-lived thread, so a silent or hostile peer cannot hold up the others. One
reader thread then waits on every connection with one epoll set and hands decoded
frames to the report ledger (supervisor.workers.ledger). Reads are non-blocking into a per-peer
buffer, so a peer that stops mid-frame holds up nobody. A frame that does not decode is
counted (by the ledger) and dropped; an oversized frame desynchronises the stream, so that
connection is closed (the worker reconnects on its next batch).

Frames go down too (protocol 2: the live requests of supervisor.live), from any thread
through `Peer.send`: written without blocking, what the socket does not take now waits in
the peer's own buffer for `Peer.push` (the main loop's tick), and a peer that stops reading
loses frames past OUT_MAX rather than holding anyone up.
"""
from __future__ import annotations

import os
import selectors
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Protocol

from mpwatch.contract import protocol
from mpwatch.supervisor import boundary
from mpwatch.supervisor.ipc import identity, sockets

COALESCE_S = 0.025
COALESCE_MIN = 8  # fewer ready peers than this: wait COALESCE_S for more before reading
OUT_MAX = 1 << 16  # bytes waiting for a peer that does not read; past it, frames are dropped


class Peer:
    __slots__ = ("buf", "conn", "dropped", "out", "out_lock", "pid", "rank", "version")

    def __init__(self, conn: Connection, rank: int, pid: int, version: int = 1):
        self.conn = conn
        self.rank = rank
        self.pid = pid
        self.version = version  # its hello's: below protocol.DOWN_VERSION it is sent nothing
        self.buf = bytearray()
        self.out = bytearray()  # frames (or their rest) the socket has not taken yet
        self.out_lock = threading.Lock()
        self.dropped = 0  # frames dropped because `out` was full

    def send(self, payload: bytes) -> bool:
        """Frame `payload` as multiprocessing.connection does and write it without blocking;
        False when it was dropped (the peer does not read, or reads an older protocol)."""
        if self.version < protocol.DOWN_VERSION:
            return False
        frame = struct.pack("!i", len(payload)) + payload
        with self.out_lock:
            if len(self.out) + len(frame) > OUT_MAX:
                self.dropped += 1
                return False
            self.out += frame
            self._write()
        return True

    def push(self) -> None:
        """Write what waits (the main loop, each tick)."""
        if self.out:
            with self.out_lock:
                self._write()

    def _write(self) -> None:
        try:
            n = os.write(self.conn.fileno(), self.out)
        except BlockingIOError:
            return
        except OSError:
            self.out.clear()  # gone: the reader sees the end of its stream and closes it
            return
        del self.out[:n]


class FrameHandler(Protocol):
    """Where frames go (supervisor.workers.ledger's ReportLedger). Called on the hub's threads;
    each call must be quick."""

    def check_hello(self, peer: Peer, cred: int | None) -> str | None: ...

    def on_hello(self, peer: Peer, msg: dict[str, Any]) -> None: ...

    def on_frame(self, peer: Peer, msg: dict[str, Any]) -> None: ...

    def on_bad(self, peer: Peer, why: str) -> None: ...

    def on_close(self, peer: Peer) -> None: ...


class ChannelHub(sockets.Listener[dict[str, Any]]):
    thread_name = "mpwatch-accept"

    def __init__(self, address: str, authkey: bytes, handler: FrameHandler):
        super().__init__(address, authkey, 512)
        self.handler = handler
        self._new: list[Peer] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()

    def start(self) -> None:
        super().start()
        threading.Thread(target=self._read_loop, name="mpwatch-reader", daemon=True).start()

    def close(self) -> None:
        super().close()
        self._wake_w.send(b"x")

    # -- accepting -----------------------------------------------------------------
    def _first(self, conn: Connection) -> dict[str, Any]:
        return _read_hello(conn)

    def _serve(self, conn: Connection, hello: dict[str, Any] | None) -> None:
        assert hello is not None  # _first returns a hello or raises
        # From here on the reader never blocks on this peer: a half-sent frame waits in
        # the peer's buffer instead of holding up every other worker.
        os.set_blocking(conn.fileno(), False)
        v = hello.get("v")
        peer = Peer(conn, hello["rank"], hello["pid"], v if type(v) is int else 1)
        why: str | None = "its hello could not be checked"
        with boundary.rank_input(None, "a hello"):
            why = self.handler.check_hello(peer, identity.peer_pid(conn))  # of the rank it names?
        if why is not None:  # refused (and said by the handler)
            self._refuse(conn)
            return
        with boundary.rank_input(peer.rank, "its hello"):
            self.handler.on_hello(peer, hello)
        with self._lock:
            self._new.append(peer)
        self._wake_w.send(b"x")

    def _refuse(self, conn: Connection) -> None:
        try:
            conn.close()
        except OSError:
            pass
        with self._refused_lock:
            self.refused += 1

    # -- reading -------------------------------------------------------------------
    def _read_loop(self) -> None:
        # One persistent epoll set: multiprocessing.connection.wait() would rebuild a
        # selector over every connection on each wakeup, O(workers) per frame.
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        while not self._closed:
            with boundary.room("channel hub"):  # a turn that fails costs that turn, never the thread
                self._turn(sel)
        for key in list(sel.get_map().values()):
            if key.data is not None:
                try:
                    key.data.conn.close()
                except OSError:
                    pass
        sel.close()

    def _turn(self, sel: selectors.BaseSelector) -> None:
        """Wait for ready peers (a little longer when few are), and read each."""
        with self._lock:
            for p in self._new:
                sel.register(p.conn, selectors.EVENT_READ, p)
            self._new.clear()
        try:
            ready = sel.select(timeout=1.0)
        except OSError:
            ready = []
        if len(ready) < COALESCE_MIN:
            # Frames arrive spread out; waking for each costs more than reading it. A short
            # wait lets one select serve many (heartbeat latency + COALESCE_S, no frame lost).
            time.sleep(COALESCE_S)
            try:
                ready = sel.select(timeout=0)
            except OSError:
                ready = []
        for key, _ in ready:
            peer = key.data
            if peer is None:
                try:
                    self._wake_r.recv(4096)
                except OSError:
                    pass
                continue
            if not self._read_ready(peer):
                sel.unregister(peer.conn)
                try:
                    peer.conn.close()
                except OSError:
                    pass
                with boundary.rank_input(peer.rank, "its channel's end"):
                    self.handler.on_close(peer)

    def _read_ready(self, peer: Peer) -> bool:
        """Read what the socket has and hand over every complete frame; False on EOF or a
        frame that breaks the stream (the connection is then closed)."""
        try:
            data = os.read(peer.conn.fileno(), 1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            if peer.buf:  # the peer went away mid-frame: that frame is lost, say so
                self._bad(peer, f"truncated frame ({len(peer.buf)} bytes, then end of stream)")
            return False
        buf = peer.buf
        buf += data
        while True:
            size, head = _frame_size(buf)
            if size is None:
                return True
            if size < 0 or size > protocol.MAX_FRAME:
                self._bad(peer, f"frame of {size} bytes is over the {protocol.MAX_FRAME} limit")
                return False
            if len(buf) < head + size:
                return True
            frame = bytes(buf[head:head + size])
            del buf[:head + size]
            try:
                self.handler.on_frame(peer, protocol.decode(frame))
            except protocol.BadFrame as exc:
                self._bad(peer, str(exc))
            except Exception as exc:  # noqa: BLE001 - a frame that trips a handler: the boundary's
                boundary.current().bad_input(peer.rank, "a frame", exc)


    def _bad(self, peer: Peer, why: str) -> None:
        with boundary.rank_input(peer.rank, "a bad frame's count"):
            self.handler.on_bad(peer, why)


def _read_hello(conn: Connection) -> dict[str, Any]:
    hello = protocol.decode(conn.recv_bytes(protocol.MAX_FRAME))
    if hello.get("t") != protocol.HELLO:
        raise protocol.BadFrame("first frame is not hello")
    if not isinstance(hello.get("rank"), int) or not isinstance(hello.get("pid"), int):
        raise protocol.BadFrame("hello without rank and pid")
    return hello


def _frame_size(buf: bytearray) -> tuple[int | None, int]:
    """(payload size, header length) of multiprocessing.connection's framing, or (None, 0)
    while the header is incomplete: a 4-byte big-endian length, or -1 and an 8-byte one."""
    if len(buf) < 4:
        return None, 0
    n: int = struct.unpack("!i", buf[:4])[0]
    if n != -1:
        return n, 4
    if len(buf) < 12:
        return None, 0
    n = struct.unpack("!Q", buf[4:12])[0]
    return n, 12
