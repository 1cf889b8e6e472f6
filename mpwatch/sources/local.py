"""A client of a supervisor's control socket, used by `mpwatch ctl` and the TUI (its
poller and worker threads; one request at a time per connection). Replies are typed by
contract.status, so a reader that indexes a key the schema lacks fails mypy.

`Requests` holds the typed wrappers every transport shares: `Client` (the local socket)
and sources.remote.client's `RemoteClient` (the same requests through `ssh HOST mpwatch
bridge`) differ only in how one request travels, so a screen cannot tell them apart."""
from __future__ import annotations

import json
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client as _Connect
from pathlib import Path
from types import TracebackType
from typing import Any, TypedDict, TypeVar, cast

from mpwatch.contract import (
    EventFields,
    GpuMark,
    GpuTick,
    GpuTimelineReply,
    Status,
    as_int,
    as_number,
    protocol,
)
from mpwatch.rundir import reader, registry


class EventsReply(TypedDict):
    """The `events` command's reply: the events after `since`, and the last seq."""

    events: list[EventFields]
    seq: int


class ControlReply(TypedDict):
    """The actions' (`checkpoint`, `profile`) and `set` commands' reply: the step every rank
    takes it at (None: each at its next call), and what was done (none for a plan)."""

    step: int | None
    message: str


def _control_reply(reply: dict[str, Any]) -> ControlReply:
    step = reply.get("step")
    return {"step": step if type(step) is int else None, "message": str(reply.get("message", ""))}


def who(kind: str) -> str:
    """Who asks, for the supervisor's records: `ctl alice@gpu-node-3`."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{kind} {user}@{socket.gethostname()}"


class ClientError(Exception):
    """A refused or failed request; the message is meant for the user."""


def parse_reply(data: bytes, who: str) -> dict[str, Any]:
    """A supervisor's reply frame as a dict; a refusal (ok false) raises its error."""
    try:
        reply = json.loads(data)
    except ValueError:
        raise ClientError(f"{who} sent an unreadable reply") from None
    return check_reply(reply, who)


def check_reply(reply: object, who: str) -> dict[str, Any]:
    """A decoded reply as a dict; a refusal (ok false) raises its error."""
    if not isinstance(reply, dict):
        raise ClientError(f"{who} sent an unreadable reply")
    if not reply.get("ok"):
        raise ClientError(str(reply.get("error", "request failed")))
    return reply


class Requests:
    """The control commands as typed calls over `request`, which a transport provides."""

    def request(self, cmd: str, /, **args: object) -> dict[str, Any]:
        """cmd's reply; args are the request's fields (any name: `self` too)."""
        raise NotImplementedError

    def close(self) -> None:
        """End the connection (each transport its own way)."""

    # Each returns its reply or raises ClientError.
    # The supervisor builds these replies from the schema; JSON cannot carry the types, so
    # each wrapper names the type its reply has (cast: checked by the producer's tests).
    def status(self, tail: int | None = None) -> Status:
        """The run's snapshot; `tail` caps each worker's loss_tail (fewer bytes for a big run)."""
        if tail is None:
            return cast(Status, self.request("status")["status"])
        return cast(Status, self.request("status", tail=tail)["status"])

    # A reply's parts are checked for their types as they are taken (a remote supervisor is
    # another machine's, maybe another version's): what is not of its type is none.
    def events(self, since: int = 0) -> EventsReply:
        reply = self.request("events", since=since)
        events = reply.get("events")
        seq = as_int(reply.get("seq"))
        return {"events": cast("list[EventFields]", [e for e in events if isinstance(e, dict)]
                               if isinstance(events, list) else []),
                "seq": since if seq is None else seq}

    def history(self, rank: int) -> list[tuple[float, float]]:
        """(step, loss) points of a rank's curve, oldest first."""
        points = self.request("history", rank=rank).get("history")
        return [(p[0], p[1]) for p in (points if isinstance(points, list) else [])  # as sent ("nan" spelled)
                if isinstance(p, list) and len(p) == 2 and None not in (as_number(p[0]), as_number(p[1]))]

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list[str]:
        got = self.request("logs", rank=rank, stream=stream, lines=lines).get("lines")
        return [x for x in got if isinstance(x, str)] if isinstance(got, list) else []

    def act(self, cmd: str, target: int | str) -> str:
        return str(self.request(cmd, target=target)["message"])

    def resize(self, n: int) -> str:
        return str(self.request("resize", n=n)["message"])

    def stop(self) -> str:
        return str(self.request("stop")["message"])

    def ask(self, action: str, target: int | str, step: int | None = None, by: str = "?", plan: bool = False,
            **args: object) -> ControlReply:
        """Ask a rank (or "all") for an action (contract.actions: "checkpoint", "profile" with
        its `steps`) through supervisor.live; with `plan`, only the step it would be taken
        at. `step` given: that step, on every rank asked."""
        return _control_reply(self.request(action, target=target, step=step, by=by, plan=plan, **args))

    def set_tunable(self, name: str, value: str, step: int | None = None, by: str = "?",
                    plan: bool = False) -> ControlReply:
        """Change a tunable on every rank; `value` as typed (the supervisor reads it by the type
        the workers declared)."""
        return _control_reply(self.request("set", name=name, value=value, step=step, by=by, plan=plan))

    def another(self) -> Requests:
        """This connection, where requests may be in flight at once (Client has its own)."""
        return self

    def ended(self, stop: threading.Event | None = None) -> tuple[Status | None, dict[str, Any] | None]:
        """How the run ended (sources.source.Source.ended): not known here (each transport its own)."""
        return None, None

    def gpu_timeline(self, window: float = 120.0) -> GpuTimelineReply:
        """What was on each GPU over the last `window` seconds (at most an hour): the GPU screen's charts."""
        reply = self.request("gpu_timeline", window=window)
        return {"ticks": cast("list[GpuTick]", reply.get("ticks", [])),
                "marks": cast("list[GpuMark]", reply.get("marks", []))}


_C = TypeVar("_C", bound="Client")


class Client(Requests):
    def __init__(self, handle: registry.RunHandle, timeout: float = 30.0):
        self.handle = handle
        self.timeout = timeout
        self._lock = threading.Lock()
        try:
            self._conn = _Connect(handle.address, family="AF_UNIX", authkey=handle.authkey)
        except AuthenticationError:
            raise ClientError(f"run {handle.run_id} refused the connection: wrong key") from None
        except (OSError, EOFError) as exc:
            raise ClientError(f"cannot reach run {handle.run_id}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None

    @classmethod
    def connect(cls: type[_C], run: str | None, tmpdir: Path) -> _C:
        """A live run by id or directory (None: the newest), looked up in the registry under
        tmpdir (settings.Settings.tmpdir)."""
        try:
            return cls(registry.resolve(run, tmpdir))
        except registry.RunError as exc:
            raise ClientError(str(exc)) from None

    @classmethod
    def at(cls: type[_C], run_dir: Path | str) -> _C:
        """The live run whose directory is run_dir."""
        try:
            return cls(registry.handle(Path(run_dir)))
        except registry.RunError as exc:
            raise ClientError(str(exc)) from None

    def another(self) -> Client:
        """A second connection to the same run (requests on one connection wait in turn)."""
        return Client(self.handle, self.timeout)

    def ended(self, stop: threading.Event | None = None) -> tuple[Status | None, dict[str, Any] | None]:
        """The run's final.json and run.json, once the supervisor has written them (it writes
        them as its socket closes), or as they are after reader.FINAL_WAIT_S."""
        final, info = reader.wait_final(self.handle.run_dir, stop)
        return reader.as_status(final), info

    def close(self) -> None:
        try:
            self._conn.close()
        except OSError:
            pass

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def request_raw(self, cmd: str, /, **args: object) -> bytes:
        """The reply frame as the supervisor sent it (one line of JSON), not decoded: the
        bridge relays it as it is."""
        with self._lock:
            try:
                self._conn.send_bytes(protocol.encode({"cmd": cmd, **args}))
                if not self._conn.poll(self.timeout):
                    raise ClientError(f"run {self.handle.run_id} did not answer within {self.timeout:g}s")
                return self._conn.recv_bytes(protocol.MAX_REPLY)
            except (OSError, EOFError):
                raise ClientError(f"lost the connection to run {self.handle.run_id} "
                                  "(it may have finished)") from None

    def request(self, cmd: str, /, **args: object) -> dict[str, Any]:
        return parse_reply(self.request_raw(cmd, **args), f"run {self.handle.run_id}")
