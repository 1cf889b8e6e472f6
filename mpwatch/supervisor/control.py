"""The control socket: authenticated request/response for the TUI and `mpwatch ctl`.

Requests and replies are protocol frames: {"cmd": NAME, ...} -> {"ok": true, ...} or
{"ok": false, "error": reason}. A peer without the run's authkey is refused by the
handshake; garbage after it gets an error reply and the connection stays usable.
"""
from __future__ import annotations

import os
import socket
import threading

from mpwatch import protocol
from mpwatch.supervisor import sockets


class ControlServer:
    def __init__(self, address: str, authkey: bytes, dispatch):
        """dispatch(request: dict) -> reply dict; raising ValueError means a bad request."""
        self.address = address
        self.authkey = authkey
        self.dispatch = dispatch
        self.sock = sockets.listen_private(address, 64)
        self._closed = False
        self.clients = 0
        self.refused = 0
        self._lock = threading.Lock()

    def start(self):
        threading.Thread(target=self._accept_loop, name="mpwatch-control", daemon=True).start()

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

    def _accept_loop(self):
        while not self._closed:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), name="mpwatch-client", daemon=True).start()

    def _serve(self, s: socket.socket):
        try:
            conn, _ = sockets.authenticate(s, self.authkey)
        except sockets.Refused:
            with self._lock:
                self.refused += 1
            return
        with self._lock:
            self.clients += 1
        try:
            while not self._closed:
                try:
                    data = conn.recv_bytes(protocol.MAX_FRAME)
                except (EOFError, OSError):
                    return
                reply = self._handle(data)
                try:
                    conn.send_bytes(protocol.encode_lossy(reply))
                except (OSError, ValueError):
                    return
        finally:
            with self._lock:
                self.clients -= 1
            try:
                conn.close()
            except OSError:
                pass

    def _handle(self, data: bytes) -> dict:
        try:
            req = protocol.decode_request(data)
            return self.dispatch(req)
        except protocol.BadFrame as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # a bug must not take the supervisor down
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
