"""The channel hub: one AF_UNIX listener, one authenticated `Connection` per process.

Each connection proves the run's authkey (multiprocessing's HMAC challenge, both ways)
on a short-lived thread, so a silent or hostile peer cannot hold up the others. One
reader thread then waits on every connection with one epoll set and hands decoded
frames to the run. Reads are non-blocking into a per-peer buffer, so a peer that stops
mid-frame holds up nobody. A frame that does not decode is counted and
dropped; an oversized frame desynchronises the stream, so that connection is closed
(the worker reconnects on its next batch).
"""
from __future__ import annotations

import os
import selectors
import socket
import struct
import threading
import time

from mpwatch import protocol
from mpwatch.supervisor import sockets

COALESCE_S = 0.025
COALESCE_MIN = 8  # fewer ready peers than this: wait COALESCE_S for more before reading


class Peer:
    __slots__ = ("bad_frames", "buf", "conn", "pid", "rank")

    def __init__(self, conn, rank, pid):
        self.conn = conn
        self.rank = rank
        self.pid = pid
        self.bad_frames = 0
        self.buf = bytearray()


class ChannelHub:
    """Calls back into the run: on_hello(peer, msg), on_frame(peer, msg), on_bad(peer|None, why),
    on_close(peer). Callbacks run on the hub's threads and must be quick."""

    def __init__(self, address: str, authkey: bytes, handler):
        self.address = address
        self.authkey = authkey
        self.handler = handler
        self.sock = sockets.listen_private(address, 512)
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
        try:
            conn, hello = sockets.authenticate(s, self.authkey, first=_read_hello)
        except sockets.Refused as exc:
            self.refused += 1
            self.handler.on_refused(str(exc))
            return
        rank, pid = hello["rank"], hello["pid"]
        # From here on the reader never blocks on this peer: a half-sent frame waits in
        # the peer's buffer instead of holding up every other worker.
        os.set_blocking(conn.fileno(), False)
        peer = Peer(conn, rank, pid)
        self.handler.on_hello(peer, hello)
        with self._lock:
            self._new.append(peer)
        self._wake_w.send(b"x")

    # -- reading -------------------------------------------------------------------
    def _read_loop(self):
        # One persistent epoll set: multiprocessing.connection.wait() would rebuild a
        # selector over every connection on each wakeup, O(workers) per frame.
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        while not self._closed:
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
                ok = self._read_ready(peer)
                if not ok:
                    sel.unregister(peer.conn)
                    try:
                        peer.conn.close()
                    except OSError:
                        pass
                    self.handler.on_close(peer)
        for key in list(sel.get_map().values()):
            if key.data is not None:
                try:
                    key.data.conn.close()
                except OSError:
                    pass
        sel.close()

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
                peer.bad_frames += 1
                self.handler.on_bad(peer, f"truncated frame ({len(peer.buf)} bytes, then end of stream)")
            return False
        buf = peer.buf
        buf += data
        while True:
            size, head = _frame_size(buf)
            if size is None:
                return True
            if size < 0 or size > protocol.MAX_FRAME:
                peer.bad_frames += 1
                self.handler.on_bad(peer, f"frame of {size} bytes is over the {protocol.MAX_FRAME} limit")
                return False
            if len(buf) < head + size:
                return True
            frame = bytes(buf[head:head + size])
            del buf[:head + size]
            try:
                self.handler.on_frame(peer, protocol.decode(frame))
            except protocol.BadFrame as exc:
                peer.bad_frames += 1
                self.handler.on_bad(peer, str(exc))
            except Exception as exc:  # noqa: BLE001 - a frame that trips a bug must not end this thread
                peer.bad_frames += 1
                self.handler.on_bad(peer, f"frame could not be applied: {type(exc).__name__}: {exc}")


def _read_hello(conn) -> dict:
    hello = protocol.decode(conn.recv_bytes(protocol.MAX_FRAME))
    if hello.get("t") != protocol.HELLO:
        raise protocol.BadFrame("first frame is not hello")
    if not isinstance(hello.get("rank"), int) or not isinstance(hello.get("pid"), int):
        raise protocol.BadFrame("hello without rank and pid")
    return hello


def _frame_size(buf: bytearray):
    """(payload size, header length) of multiprocessing.connection's framing, or (None, 0)
    while the header is incomplete: a 4-byte big-endian length, or -1 and an 8-byte one."""
    if len(buf) < 4:
        return None, 0
    (n,) = struct.unpack("!i", buf[:4])
    if n != -1:
        return n, 4
    if len(buf) < 12:
        return None, 0
    (n,) = struct.unpack("!Q", buf[4:12])
    return n, 12
