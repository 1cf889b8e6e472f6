"""The control socket: authenticated request/response for the TUI and `mpwatch ctl`.

Requests and replies are protocol frames: {"cmd": NAME, ...} -> {"ok": true, ...} or
{"ok": false, "error": reason}. A peer without the run's authkey is refused by the
handshake; garbage after it gets an error reply and the connection stays usable.
Each client is served on its own thread; `dispatch` is supervisor.commands's. A refusal
(supervisor.errors.CommandError) is answered with its message; any other exception is a bug:
its traceback goes to supervisor.log and the client gets "internal error: ..." (supervisor.errors).
"""
from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from mpwatch.contract import Reply, protocol
from mpwatch.supervisor import boundary, errors
from mpwatch.supervisor.ipc import sockets


class CtlServer(sockets.Listener[None]):
    thread_name = "mpwatch-control"

    def __init__(self, address: str, authkey: bytes, dispatch: Callable[[dict[str, Any]], Reply]):
        """dispatch(request) -> reply; raising errors.CommandError refuses the request."""
        super().__init__(address, authkey, 64)
        self.dispatch = dispatch

    def _serve(self, conn: Connection, first: None) -> None:
        try:
            while not self._closed:
                try:
                    data = conn.recv_bytes(protocol.MAX_FRAME)
                except (EOFError, OSError):
                    return
                payload = self._encode(self._handle(data))
                try:
                    conn.send_bytes(payload)
                except (OSError, ValueError):
                    return
        finally:
            try:
                conn.close()
            except OSError:
                pass

    @staticmethod
    def _encode(reply: Reply) -> bytes:
        """The reply's frame; one that cannot be encoded is a bug (logged): the client is told,
        and its connection stays (a thread that died of it closed the connection unsaid)."""
        try:
            return protocol.encode_lossy(reply)
        except Exception as exc:  # noqa: BLE001 - a bug must not cost the client its connection
            line = boundary.failed("control commands", exc, "a reply's encoding")
            return protocol.encode({"ok": False, "error": line})

    def _handle(self, data: bytes) -> Reply:
        cmd: object = None
        try:
            req = protocol.decode_request(data)
            cmd = req.get("cmd")
            return self.dispatch(req)
        except protocol.BadFrame as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        except errors.CommandError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a bug must not take the supervisor down
            line = boundary.failed("control commands", exc, f"control command {cmd!r}")
            return {"ok": False, "error": line}
