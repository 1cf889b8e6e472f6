"""`mpwatch bridge [RUN]`: a live run's control protocol on standard input and output, for
`ssh -T HOST mpwatch bridge RUN` (sources.remote.client starts it; the wire is sources.remote.wire).

It runs as the SSH user, so SSH has done the authentication, and it finds RUN exactly as a
local `mpwatch ctl` would (registry.resolve, which sees only this user's private runtime
directory): it can reach nothing `ctl` could not. It opens no port; it relays each request
to the run's control socket and the reply back as the supervisor sent it. Once the run has
ended, every request gets "gone" with final.json. It exits when its input closes (the ssh
session ended), so it never outlives its viewer.

The main thread reads requests; each one is relayed on a thread of its own (at most
MAX_INFLIGHT at a time), over a small pool of control connections, so a slow status
never holds up a key press. Replies are written whole, one at a time.
"""
from __future__ import annotations

import getpass
import os
import select
import socket
import sys
import threading
import time
from typing import Any, BinaryIO

from mpwatch import __version__
from mpwatch.cli.args import Parser
from mpwatch.contract import protocol
from mpwatch.rundir import reader, registry
from mpwatch.settings import Settings
from mpwatch.sources.local import Client, ClientError
from mpwatch.sources.remote import wire

HELLO_WAIT_S = 30.0  # the client speaks first; a bridge nobody talks to goes away
MAX_INFLIGHT = 8
# After its input closes, how long the requests in flight may take (a Client's timeout is 30 s).
DRAIN_S = 40.0


class Bridge:
    """Relays requests for one run; `serve` returns when the input closes."""

    def __init__(self, handle: registry.RunHandle, out: BinaryIO):
        self.handle = handle
        self.out = out
        self._write_lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._idle: list[Client] = []  # connections not in use
        self._slots = threading.BoundedSemaphore(MAX_INFLIGHT)
        self._gone: dict[str, Any] | None = None  # {"final", "info"} once the run has ended
        self.broken = False  # the output is gone: stop

    def serve(self, inp: BinaryIO) -> None:
        """Relay each request line until the input closes; the requests still in flight then
        are answered before it returns (a piped `pause 0` happens)."""
        while not self.broken:
            line = inp.readline(wire.MAX_REQUEST + 1)
            if not line:
                self._drain()
                return
            if not line.endswith(b"\n"):
                self._write(wire.encode({"id": None, "reply": {"ok": False, "error": "request too long"}}))
                return
            self._slots.acquire()
            threading.Thread(target=self._handle, args=(line,), name="mpwatch-bridge-req",
                             daemon=True).start()

    def _drain(self) -> None:
        """Wait (at most DRAIN_S) until no request is in flight."""
        deadline = time.monotonic() + DRAIN_S
        for _ in range(MAX_INFLIGHT):
            if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return

    def close(self) -> None:
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _handle(self, line: bytes) -> None:
        try:
            try:
                req = wire.decode(line)  # a request nested past jsonread.MAX_DEPTH is refused, in words
            except protocol.BadFrame as exc:
                self._write(wire.encode({"id": None, "reply": {"ok": False, "error": f"bad request: {exc}"}}))
                return
            self._write(self._answer(req))
        except Exception as exc:  # noqa: BLE001 - a request the bridge cannot even word still gets an answer
            self._write(wire.encode({"id": None, "reply": {
                "ok": False, "error": f"bad request: {type(exc).__name__}: {str(exc)[:200]}"}}))
        finally:
            self._slots.release()

    def _answer(self, req: dict[str, Any]) -> bytes:
        """The reply line to one request (its id sent back only when it is a plain one)."""
        req_id = _plain_id(req.pop("id", None))
        cmd = req.pop("cmd", None)
        if not isinstance(cmd, str):
            return wire.encode({"id": req_id, "reply": {"ok": False, "error": "bad request: no cmd"}})
        try:
            return self._relay(req_id, cmd, req)
        except Exception as exc:  # noqa: BLE001 - every request gets its answer; the relay goes on
            return wire.encode({"id": req_id, "reply": {
                "ok": False, "error": f"bad request: {type(exc).__name__}: {str(exc)[:200]}"}})

    def _relay(self, req_id: object, cmd: str, args: dict[str, Any]) -> bytes:
        if self._gone is None:
            try:
                raw = self._request(cmd, args)
                if b"\n" not in raw:
                    return wire.wrap_reply(req_id, raw)
                error = "the run sent a reply the bridge cannot frame"
            except ClientError as exc:
                error = str(exc)
                if self._ended():
                    self._gone = self._final()
        if self._gone is not None:
            return wire.encode({"id": req_id, "gone": self._gone,
                                "reply": {"ok": False, "error": f"run {self.handle.run_id} has ended"}})
        return wire.encode({"id": req_id, "reply": {"ok": False, "error": error}})

    def _request(self, cmd: str, args: dict[str, Any]) -> bytes:
        with self._pool_lock:
            client = self._idle.pop() if self._idle else None
        if client is None:
            client = Client(self.handle)
        try:
            raw = client.request_raw(cmd, **args)
        except ClientError:
            client.close()  # a connection that failed once is not reused
            raise
        with self._pool_lock:
            self._idle.append(client)
        return raw

    def _ended(self) -> bool:
        return registry.run_ended(self.handle.run_dir, self.handle.pid)

    def _final(self) -> dict[str, Any]:
        final, info = reader.wait_final(self.handle.run_dir)
        return {"final": final, "info": info}

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            try:
                self.out.write(data)
                self.out.flush()
            except (OSError, ValueError):
                self.broken = True


def _plain_id(req_id: object) -> object:
    """A request id as it can be sent back: a number or a string (clients send numbers); any
    other (a list nested 990 deep, an object) is none, so that every reply can be written."""
    return req_id if req_id is None or isinstance(req_id, (int, str)) else None


def _read_hello(inp: BinaryIO) -> dict[str, Any] | str:
    """The client's hello line, or why there is none."""
    ready, _, _ = select.select([inp], [], [], HELLO_WAIT_S)
    if not ready:
        return f"no hello from the client within {HELLO_WAIT_S:g}s"
    line = inp.readline(wire.MAX_REQUEST + 1)
    try:
        msg = wire.decode(line)
    except protocol.BadFrame:
        return "the client did not start with a hello"
    return msg if wire.is_hello(msg) else "the client did not start with a hello"


def _hello(v: int, **fields: object) -> bytes:
    return wire.encode({"t": "hello", "proto": wire.PROTO, "v": v, "mpwatch": __version__,
                        "host": socket.gethostname(), "user": getpass.getuser(), **fields})


def cmd_bridge(argv: list[str], settings: Settings) -> int:
    p = Parser(prog="mpwatch bridge", description=(
        "Serve a live run's control protocol on stdin/stdout, for 'ssh HOST mpwatch bridge RUN' "
        "(mpwatch attach HOST:RUN, ctl --host, ls --host start it; not meant to be typed)."))
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or directory (default: the newest live run)")
    p.add_argument("--ls", action="store_true", help="list this user's live runs in the hello, then exit")
    ns = p.parse_args(argv)
    # The wire is stdout alone: anything printed by mistake goes to stderr instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    hello = _read_hello(inp)
    v = wire.pick_version(hello) if isinstance(hello, dict) else hello
    with out:
        if isinstance(v, str):
            out.write(_hello(wire.VERSION, error=v))
            return 2
        if ns.ls:
            try:
                out.write(_hello(v, runs=registry.live_runs(settings.tmpdir)))
            except registry.RunError as exc:
                out.write(_hello(v, error=str(exc)))
                return 2
            return 0
        try:
            handle = registry.resolve(ns.run, settings.tmpdir)
        except registry.RunError as exc:
            out.write(_hello(v, error=str(exc)))
            return 2
        run = wire.BridgeRun(run_id=handle.run_id, run_dir=str(handle.run_dir), pid=handle.pid)
        out.write(_hello(v, run=run))
        out.flush()
        bridge = Bridge(handle, out)
        try:
            bridge.serve(inp)
        finally:
            bridge.close()
    return 0
