"""A live run on another machine, reached through OpenSSH: `ssh -T -o BatchMode=yes HOST
mpwatch bridge RUN` speaks the control protocol on its stdio (cli.bridge; the wire is
sources.remote.wire). RemoteClient answers exactly what sources.local's Client answers (the
same typed requests, the same ClientError), so `ctl`, `ls` and the TUI's screens do not
know which they have. SSH does the authentication (keys, agent, ProxyJump: whatever the
user's ssh does); mpwatch opens no port of its own.

Requests may be made from any thread, several at a time: each carries an id, and a reader
thread hands every reply line to the request waiting for it. A failed transport (ssh ended,
the host went away, no answer in time) raises LinkLost; a run that has ended there raises
RunEnded, with its final status. Errors are one line, worded from ssh's own.
"""
from __future__ import annotations

import collections
import itertools
import os
import queue
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any, cast

from mpwatch.contract import Status, protocol, shape
from mpwatch.rundir import reader
from mpwatch.rundir.registry import RegistryEntry
from mpwatch.settings import Settings
from mpwatch.sources.local import ClientError, Requests, check_reply
from mpwatch.sources.remote import wire
from mpwatch.text.safe import printable

SSH_OPTIONS = ("-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
               # A host that went away silently is noticed within 15 s, not at TCP's pace.
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")
CONNECT_S = 30.0  # ssh's start, the login and the hello
STDERR_LINES = 20


class LinkLost(ClientError):
    """The way to the run is gone (ssh ended, the host went away, no answer in time); the
    run itself may be fine: trying again may work."""


class RunEnded(ClientError):
    """The run has ended on that machine; final is its final.json (None when missing)."""

    def __init__(self, message: str, final: Status | None, info: dict[str, Any] | None):
        super().__init__(message)
        self.final = final
        self.info = info


@dataclass(frozen=True)
class Target:
    """HOST:RUN on the command line; run None is the newest live run there."""

    host: str
    run: str | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.run or ''}"


def parse_target(text: str) -> Target | None:
    """HOST:RUN (or HOST: for the newest run there), else None (a local RUN). A path that
    exists here is always local, colon or not."""
    if ":" not in text or os.path.exists(text):
        return None
    host, _, run = text.partition(":")
    if not host or host.startswith("-") or any(c.isspace() for c in host):
        return None
    return Target(host, run or None)


@dataclass(frozen=True)
class Transport:
    """How to start the bridge: the ssh command (MPWATCH_SSH, e.g. "ssh -F ~/.ssh/cluster.conf":
    settings.Settings.ssh) and the remote mpwatch."""

    ssh: tuple[str, ...] = ("ssh",)
    remote_mpwatch: str = "mpwatch"
    extra: tuple[str, ...] = field(default=())  # more ssh options (tests, benches)

    @classmethod
    def from_settings(cls, settings: Settings, remote_mpwatch: str | None = None) -> Transport:
        """settings: the CLI's. Raises ClientError for a --remote-mpwatch that is no command
        line (an unclosed quote)."""
        ssh = settings.ssh
        try:
            if not shlex.split(remote_mpwatch or "mpwatch"):
                raise ValueError("empty")
        except ValueError as exc:
            raise ClientError(f"--remote-mpwatch {remote_mpwatch!r} is no command: {exc}") from None
        return cls(ssh=ssh, remote_mpwatch=remote_mpwatch or "mpwatch")

    def argv(self, host: str, bridge_args: list[str]) -> list[str]:
        remote = [*shlex.split(self.remote_mpwatch), "bridge", *bridge_args]
        return [*self.ssh, *SSH_OPTIONS, *self.extra, "--", host, " ".join(map(_quote, remote))]


def _quote(word: str) -> str:
    """A word for the remote shell; a leading ~/ stays unquoted, so that it means the home
    directory there (`--remote-mpwatch '~/venv/bin/mpwatch'`)."""
    if word.startswith("~/"):
        return "~/" + shlex.quote(word[2:])
    return shlex.quote(word)


class _Slot:
    """One request waiting for its reply line."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.msg: dict[str, Any] | None = None


class RemoteClient(Requests):
    def __init__(self, target: Target, transport: Transport, timeout: float = 30.0, ls: bool = False):
        self.target = target
        self.host = target.host
        self.transport = transport
        self.timeout = timeout
        self.run_id = "?"
        self.run_dir = ""  # on that machine
        self.runs: list[RegistryEntry] = []  # with ls=True: the live runs there
        self.peer: dict[str, Any] = {}  # the bridge's hello
        self._lost: str | None = None
        self._ended: tuple[Status | None, dict[str, Any] | None] = (None, None)  # the bridge's "gone"
        self._pending: dict[int, _Slot] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._hello: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._noise: list[str] = []
        args = ["--ls"] if ls else (["--", target.run] if target.run else [])  # a RUN may start with "-"
        try:
            self.proc = subprocess.Popen(self.transport.argv(target.host, args), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         start_new_session=True)  # a Ctrl-C of the TUI is not ssh's
        except OSError as exc:
            raise LinkLost(f"cannot start ssh ({self.transport.ssh[0]}): {exc.strerror}") from None
        threading.Thread(target=self._read_stderr, name="mpwatch-ssh-stderr", daemon=True).start()
        threading.Thread(target=self._read_replies, name="mpwatch-ssh-reader", daemon=True).start()
        self._handshake(ls)

    # ------------------------------------------------------------- handshake ----
    def _handshake(self, ls: bool) -> None:
        try:
            self._send(wire.client_hello())
            hello = self._hello.get(timeout=CONNECT_S)
        except queue.Empty:
            self.close()
            raise LinkLost(f"no answer from {self.host} within {CONNECT_S:g}s "
                           f"(ssh {self._last_stderr()})") from None
        except LinkLost:
            hello = None
        if hello is None:
            why = self._why_ended()
            self.close()
            raise LinkLost(why)
        self.peer = hello
        bad = wire.check_version(hello) if "error" not in hello else None
        if "error" in hello or bad:
            self.close()
            raise ClientError(f"{self.host}: {bad or hello['error']}")
        if ls:
            runs = hello.get("runs")
            self.runs = [cast(RegistryEntry, e) for e in runs if shape.problem(e, RegistryEntry) is None] \
                if isinstance(runs, list) else []
            return
        run = hello.get("run") or {}
        self.run_id, self.run_dir = str(run.get("run_id", "?")), str(run.get("run_dir", ""))

    # --------------------------------------------------------------- readers ----
    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line:
                self._stderr.append(printable(line))

    def _read_replies(self) -> None:
        out: IO[bytes] | None = self.proc.stdout
        assert out is not None
        greeted = False
        for line in iter(lambda: out.readline(wire.MAX_REPLY), b""):
            try:
                msg = wire.decode(line)
            except protocol.BadFrame:
                msg = None
            if not greeted:
                if msg is not None and wire.is_hello(msg):
                    greeted = True
                    self._hello.put(msg)
                elif len(self._noise) < wire.NOISE_LINES:
                    self._noise.append(line.decode(errors="replace").strip())
                else:
                    break
                continue
            if msg is None:
                continue  # a line cut short or garbled: its request times out
            req_id = msg.get("id")
            with self._lock:
                slot = self._pending.pop(req_id, None) if isinstance(req_id, int) else None
            if slot is not None:
                slot.msg = msg
                slot.done.set()
        self._fail_all(greeted)

    def _fail_all(self, greeted: bool) -> None:
        if not greeted:
            self._hello.put(None)
        why = self._why_ended() if greeted else None
        with self._lock:
            if self._lost is None:
                self._lost = why or f"lost the ssh connection to {self.host}"
            pending, self._pending = self._pending, {}
        for slot in pending.values():
            slot.done.set()

    # -------------------------------------------------------------- wording ----
    def _last_stderr(self) -> str:
        lines = [ln for ln in self._stderr if not ln.startswith("Warning: Permanently added")]
        return lines[-1] if lines else "said nothing"

    def _why_ended(self) -> str:
        """Why ssh ended, in one line, from its exit code and what it said."""
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        time.sleep(0.05)  # the stderr reader's last line
        said = self._last_stderr()
        h = self.host
        text = " ".join(self._stderr)
        if code == 255 or "ssh:" in text:
            if "Permission denied" in text or "Too many authentication failures" in text:
                return f"ssh refused the login to {h}: {said} (ssh runs in BatchMode: set up key-based login)"
            if "Host key verification failed" in text:
                return f"ssh refused {h}: {said} (log in once with plain ssh to check and accept its key)"
            return f"cannot reach {h}: {said}"
        if code == 127 or "command not found" in text or "No such file or directory" in text:
            return (f"mpwatch not found on {h} ({said}): give its path there with --remote-mpwatch "
                    f"(a non-interactive shell may not see your PATH)")
        if self._noise and not text:
            return f"{h} did not start the bridge; it said: {self._noise[-1][:200]}"
        if code is not None and code != 0:
            return f"the mpwatch on {h} cannot bridge (exit code {code}: {said}); is it older than this one?"
        return f"the ssh connection to {h} ended" + (f" ({said})" if self._stderr else "")

    # -------------------------------------------------------------- requests ----
    def _send(self, data: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with self._write_lock:
            try:
                stdin.write(data)
                stdin.flush()
            except (OSError, ValueError):
                raise LinkLost(self._lost or f"lost the ssh connection to {self.host}") from None

    def request(self, cmd: str, /, **args: object) -> dict[str, Any]:
        slot = _Slot()
        with self._lock:
            if self._lost is not None:
                raise LinkLost(self._lost)
            req_id = next(self._ids)
            self._pending[req_id] = slot
        self._send(wire.encode({"id": req_id, "cmd": cmd, **args}))
        if not slot.done.wait(self.timeout):
            with self._lock:
                self._pending.pop(req_id, None)
            raise LinkLost(f"{self.host} did not answer within {self.timeout:g}s")
        msg = slot.msg
        if msg is None:
            raise LinkLost(self._lost or f"lost the ssh connection to {self.host}")
        gone = msg.get("gone")
        if isinstance(gone, dict):
            info = gone.get("info")
            self._ended = (reader.as_status(gone.get("final")), info if isinstance(info, dict) else None)
            raise RunEnded(f"run {self.run_id} on {self.host} has ended", *self._ended)
        return check_reply(msg.get("reply"), self.host)

    def status(self, tail: int | None = None) -> Status:
        """The run's snapshot, refused whole when it lacks what this mpwatch reads (a status
        from another version of mpwatch there, or from something that is not mpwatch)."""
        st = super().status(tail)
        why = shape.problem(st, Status)
        if why is not None:
            raise ClientError(f"{self.host}: the run there sent a status this mpwatch cannot read ({why}); "
                              "install the same mpwatch on both machines")
        return st

    @property
    def lost(self) -> str | None:
        """Why the link is gone, or None while it works."""
        return self._lost

    def another(self) -> RemoteClient:
        """Requests share the one ssh connection: several may be in flight at once."""
        return self

    def ended(self, stop: threading.Event | None = None) -> tuple[Status | None, dict[str, Any] | None]:
        """What the bridge said of the run's end (its final.json and run.json), once it said so."""
        return self._ended

    def close(self) -> None:
        """End the session: the bridge sees its input close and exits, then ssh does."""
        with self._lock:
            if self._lost is None:
                self._lost = f"the connection to {self.host} was closed"
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(3)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def remote_runs(host: str, transport: Transport) -> list[RegistryEntry]:
    """The live runs of the SSH user on host (`mpwatch ls` there)."""
    client = RemoteClient(Target(host), transport, ls=True)
    client.close()
    return client.runs
