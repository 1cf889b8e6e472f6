"""A client of a supervisor's control socket, used by `mpwatch ctl` and the TUI."""
from __future__ import annotations

import json
import threading
from multiprocessing.connection import AuthenticationError
from multiprocessing.connection import Client as _Connect

from mpwatch import protocol, registry
from mpwatch.status import GpuTimelineReply


class ClientError(Exception):
    """A refused or failed request; the message is meant for the user."""


class Client:
    def __init__(self, handle: registry.RunHandle, timeout: float = 30.0):
        self.handle = handle
        self.timeout = timeout
        self._lock = threading.Lock()
        try:
            self._conn = _Connect(handle.address, family="AF_UNIX", authkey=handle.authkey)
        except AuthenticationError:
            raise ClientError(f"run {handle.run_id} refused the connection: wrong key") from None
        except (OSError, EOFError) as exc:
            raise ClientError(f"cannot reach run {handle.run_id}: {getattr(exc, 'strerror', None) or exc}") from None

    @classmethod
    def connect(cls, run: str | None = None) -> Client:
        try:
            return cls(registry.resolve(run))
        except registry.RunError as exc:
            raise ClientError(str(exc)) from None

    def another(self) -> Client:
        """A second connection to the same run (requests on one connection wait in turn)."""
        return Client(self.handle, self.timeout)

    def close(self):
        try:
            self._conn.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, cmd: str, **args) -> dict:
        with self._lock:
            try:
                self._conn.send_bytes(protocol.encode({"cmd": cmd, **args}))
                if not self._conn.poll(self.timeout):
                    raise ClientError(f"run {self.handle.run_id} did not answer within {self.timeout:g}s")
                data = self._conn.recv_bytes(protocol.MAX_REPLY)
            except (OSError, EOFError):
                raise ClientError(f"lost the connection to run {self.handle.run_id} (it may have finished)") from None
        try:
            reply = json.loads(data)
        except ValueError:
            raise ClientError(f"run {self.handle.run_id} sent an unreadable reply") from None
        if not reply.get("ok"):
            raise ClientError(reply.get("error", "request failed"))
        return reply

    # Convenience wrappers: each returns the reply dict or raises ClientError.
    def status(self, tail: int | None = None) -> dict:
        """The run's snapshot; `tail` caps each worker's loss_tail (fewer bytes for a big run)."""
        if tail is None:
            return self.request("status")["status"]
        return self.request("status", tail=tail)["status"]

    def events(self, since: int = 0) -> dict:
        return self.request("events", since=since)

    def history(self, rank: int) -> list:
        return self.request("history", rank=rank)["history"]

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list:
        return self.request("logs", rank=rank, stream=stream, lines=lines)["lines"]

    def act(self, cmd: str, target) -> str:
        return self.request(cmd, target=target)["message"]

    def resize(self, n: int) -> str:
        return self.request("resize", n=n)["message"]

    def stop(self) -> str:
        return self.request("stop")["message"]

    def gpu_timeline(self, window: float = 120) -> GpuTimelineReply:
        """The GPU ticks and marks of the last `window` seconds (at most an hour)."""
        r = self.request("gpu_timeline", window=window)
        return {"ticks": r["ticks"], "marks": r["marks"]}
