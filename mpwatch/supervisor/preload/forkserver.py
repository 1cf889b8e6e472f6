"""The supervisor's side of the run's forkserver (worker.boot.forkserver): its process, started
as the supervisor's child in a session of its own, and the messages between them (one JSON
object a packet on a SOCK_SEQPACKET pair; a worker's stdout and stderr ride along its spawn
request). `ForkedProc` is a worker it forked, as the reaper reads a Popen: its pid, and its
returncode once the forkserver says it ended.

Main thread only (the run's starts and its reaper), as Popen was.
"""
from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Literal

from mpwatch.contract import protocol
from mpwatch.supervisor import spawn

SERVER = str(Path(spawn.INJECT_DIR) / "forkserver.py")
ARGV = [sys.executable, "-c", "exec(input())"]  # short: a worker's command line is written over it
# Its stdin's line: loads the forkserver by file under its own name (never as a module of mpwatch,
# whose import would set up a channel), with the cwd ('' of -c) off sys.path.
BOOT = ("import sys; del sys.path[0]; import importlib.util as u; "
        f"s = u.spec_from_file_location('_mpwatch_forkserver', {SERVER!r}); m = u.module_from_spec(s); "
        "sys.modules[s.name] = m; s.loader.exec_module(m); m.main({fd}, {pid}, {modules!r}, {follow!r})")
PAD_VAR = protocol.ENV_FORKSERVER_PAD  # worker.boot.forkserver's: room for each child's environment
ENV_ROOM = 1 << 15  # bytes of it: a worker's own variables (and tunables) beyond the forkserver's
MAX_MSG = 1 << 20  # the forkserver's bound on a request (worker.boot.forkserver.MAX_MSG)
SPAWN_S = 30.0  # a fork answered in this long, or the forkserver is given up on
CLOSE_S = 5.0
ENDED = "the forkserver ended"
PUMPED_S = 0.05  # a ForkedProc's poll reads the socket itself when nobody has for this long
LOADED_EXTRA = 4  # the ready message's modules: those asked and at most this many that followed them
NAME_MAX = 200  # characters of a module's name there
LOAD_S = 600.0  # a forkserver not ready after this long is given up on: the workers start by exec

State = Literal["loading", "ready", "failed"]


class ForkedProc:
    """A worker the forkserver forked (its child, not ours): what the reaper reads of a Popen."""

    def __init__(self, pid: int, server: Forkserver):
        self.pid = pid
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            if time.monotonic() - self._server.pumped > PUMPED_S:  # the serve loop pumps each tick
                self._server.pump()
            status = self._server.exits.pop(self.pid, None)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif self._server.state == "failed" and not _running(self.pid):
                self.returncode = -signal.SIGKILL  # the forkserver died: its children died with it
        return self.returncode


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (its parent, the forkserver, is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


class Forkserver:
    def __init__(self, modules: list[str], env: dict[str, str], cwd: str, title: list[str],
                 follow: bool = False):
        """title: the workers' command line (the same for every worker of a run): the forkserver's
        own is made as long, so that each child shows its own in its place. follow: import what
        follows the modules too (preload.detect.builds_models)."""
        self.modules = modules
        self.follow = follow
        self.title = title
        self.env = env
        self.cwd = cwd
        self.state: State = "loading"
        self.why: str | None = None  # why it failed
        self.info: dict[str, Any] = {}  # its ready message: pid, modules, seconds, tasks
        self.exits: dict[int, int] = {}  # pid -> wait status, until its ForkedProc reads it
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self._ids = 0
        self._logs: list[IO[bytes]] = []
        self.pumped = 0.0  # monotonic time of the last pump
        self.started = time.monotonic()

    def start(self) -> None:
        """Start the process (it imports the modules on its own; `pump` hears when it is ready)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for sock, opt in ((mine, socket.SO_SNDBUF), (theirs, socket.SO_RCVBUF)):
            try:  # room for a large environment in one packet (the system's maximum bounds it)
                sock.setsockopt(socket.SOL_SOCKET, opt, MAX_MSG)
            except OSError:
                pass
        # what it prints as it starts (a user's sitecustomize, a preload's warnings): each worker prints it
        self._logs = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # noqa: SIM115 - closed in close()
        boot = BOOT.format(fd=theirs.fileno(), pid=os.getpid(), modules=self.modules, follow=self.follow)
        try:
            self.proc = subprocess.Popen(
                _padded(ARGV, self.title), env={**self.env, PAD_VAR: " " * ENV_ROOM}, cwd=self.cwd,
                stdin=subprocess.PIPE, stdout=self._logs[0], stderr=self._logs[1], pass_fds=[theirs.fileno()],
                start_new_session=True, close_fds=True)
            assert self.proc.stdin is not None  # a pipe
            with self.proc.stdin as line:
                line.write(boot.encode() + b"\n")
        finally:
            theirs.close()
        mine.setblocking(False)
        self.sock = mine

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def loaded(self) -> list[str]:
        """What it imported, as its ready message lists it (what was asked, and what follows
        torch: worker.boot.forkserver's FOLLOWERS), bounded; else what it was asked."""
        got = self.info.get("modules")
        if (isinstance(got, list) and len(got) <= len(self.modules) + LOADED_EXTRA
                and all(isinstance(m, str) and 0 < len(m) <= NAME_MAX for m in got)):
            return got
        return self.modules

    def pump(self) -> None:
        """Read what the forkserver said, without waiting: ready, failed, children's exits."""
        self.pumped = time.monotonic()
        if self.state == "loading" and self.pumped - self.started > LOAD_S:
            self._lost(f"its imports took more than {LOAD_S:g}s")
            return
        while self.sock is not None:
            data = self._recv(self.sock)
            if not data:  # nothing waits, or it is gone
                return
            self._take(data)

    def _recv(self, sock: socket.socket) -> bytes | None:
        """What the forkserver sent; None when nothing waits; b"" once it is gone (said: _lost)."""
        try:
            data = sock.recv(MAX_MSG)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        if not data:
            self._lost(ENDED)
        return data

    def _take(self, data: bytes) -> dict[str, Any] | None:
        try:
            msg = json.loads(data)
        except ValueError:
            return None
        t = msg.get("t") if isinstance(msg, dict) else None
        if t == "exit" and type(msg.get("pid")) is int and type(msg.get("status")) is int:
            self.exits[msg["pid"]] = msg["status"]
        elif t == "ready" and self.state == "loading":
            self.state, self.info = "ready", msg
        elif t == "failed":
            self._lost(str(msg.get("why"))[:500])
        return msg if isinstance(msg, dict) else None

    def _lost(self, why: str) -> None:
        if self.state != "failed":
            if self.state == "loading" and why == ENDED:
                why = self._died()
            self.state, self.why = "failed", why
        self.close()

    def _died(self) -> str:
        """Why a forkserver that never said ready ended: its last line on stderr."""
        try:
            self._logs[1].seek(0)
            lines = self._logs[1].read(1 << 16).decode(errors="replace").strip().splitlines()
        except (OSError, ValueError, IndexError):
            lines = []
        return "the forkserver ended before it was ready" + (f": {lines[-1][:300]}" if lines else "")

    def spawn(self, argv: list[str], env: dict[str, str], stdout: IO[bytes], stderr: IO[bytes], cwd: str,
              launch: str) -> ForkedProc | str:
        """Fork a worker: its ForkedProc, or why the forkserver could not (it may serve the next)."""
        if self.state != "ready" or self.sock is None:
            return f"the forkserver is {self.state}"
        self._ids += 1
        req = {"t": "spawn", "id": self._ids, "argv": argv, "env": env, "cwd": cwd, "launch": launch,
               "umask": _umask(), "rlimits": _limits()}
        data = json.dumps(req, separators=(",", ":")).encode()
        if len(data) > MAX_MSG:
            return f"a request of {len(data)} bytes does not fit the forkserver's socket (its {MAX_MSG})"
        try:
            self.sock.settimeout(SPAWN_S)  # a forkserver slow to read is waited for, as its answer is
            socket.send_fds(self.sock, [data], [stdout.fileno(), stderr.fileno()])
        except OSError as exc:
            if exc.errno in (errno.EMSGSIZE, errno.ENOBUFS, errno.ENOMEM, errno.EAGAIN):  # this request alone
                return f"a request of {len(data)} bytes does not fit the forkserver's socket ({exc.strerror})"
            self._lost(f"the forkserver took no request: {exc.strerror or exc}")
            return str(self.why)
        finally:
            if self.sock is not None:
                self.sock.setblocking(False)
        return self._answer(self._ids)

    def _answer(self, rid: int) -> ForkedProc | str:
        deadline = time.monotonic() + SPAWN_S
        while self.sock is not None and (left := deadline - time.monotonic()) > 0:
            select.select([self.sock], [], [], left)
            data = self._recv(self.sock)
            if data is None:
                continue
            if not data:
                break
            msg = self._take(data)
            if msg is not None and msg.get("id") == rid:
                if msg.get("t") == "spawned" and type(msg.get("pid")) is int:
                    return ForkedProc(msg["pid"], self)
                return f"the forkserver refused: {str(msg.get('why'))[:300]}"
        if self.state != "failed":
            self._lost(f"no fork in {SPAWN_S:g}s")
        return str(self.why)

    def close(self) -> None:
        """End it (a closed socket is its end; one still importing is not listening: SIGKILL);
        SIGKILL if it lingers. Its children are gone by now."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            if not self.info:  # never ready: still importing, or done for
                self.proc.kill()
            try:
                self.proc.wait(timeout=CLOSE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in self._logs:
            f.close()
        self._logs = []


def _padded(argv: list[str], title: list[str]) -> list[str]:
    """argv with one more argument that makes it as long (NUL-separated) as `title`, where title is longer."""
    have, need = (sum(len(os.fsencode(a)) + 1 for a in args) for args in (argv, title))
    return argv + ["x" * (need - have - 1)] if need > have else list(argv)


def _umask() -> int | None:
    """This process's umask, read without changing it (os.umask would, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _limits() -> list[list[int]]:
    """This process's resource limits, which an exec'd worker would inherit."""
    import resource

    out = []
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            res = getattr(resource, name)
            try:
                out.append([res, *resource.getrlimit(res)])
            except (OSError, ValueError):
                continue
    return out
