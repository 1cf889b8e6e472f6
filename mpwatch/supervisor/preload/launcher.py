"""How the run starts a worker: forked by the run's forkserver when one serves (torch imported
once for every worker, launched, restarted or added by a resize), by exec otherwise
(supervisor.spawn). The forkserver starts with the run when there is something to preload
(supervisor.preload.detect); the first launch waits for it (supervisor.resize asks `loading`).
Where forking cannot hold (a preload that fails, a worker whose interpreter would start
differently, a forkserver that ends) that worker, or every one from then on, is exec'd, and the
run says so once: a `preload_fallback` event (a --headless line, the events screen) and a line in
supervisor.log.

Main thread only.
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import IO

from mpwatch.contract import Event
from mpwatch.supervisor import errors, spawn
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.options import Options
from mpwatch.supervisor.preload import detect
from mpwatch.supervisor.preload.forkserver import ForkedProc, Forkserver

# Variables an interpreter (or a library it loads: torch's OpenMP, its allocator) reads as it
# starts: a worker whose value differs from the forkserver's cannot be one of its forks.
AT_START = ("PYTHON", "LD_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "MALLOC_")


class Launcher:
    def __init__(self, opts: Options, log: EventLog):
        self.opts = opts
        self.log = log
        self.server: Forkserver | None = None
        self.env: dict[str, str] = {}  # the forkserver's
        self.fell_back = False
        self.announced = False

    def open(self, env: dict[str, str]) -> None:
        """Start the forkserver where there is something to preload (`env`: spawn.forkserver_env)."""
        modules, why = detect.modules(self.opts)
        if why is not None:
            self._fallback(why)
        if not modules:
            return
        self.env = env
        o = self.opts
        follow = "torch" in modules and detect.builds_models(o)
        server = Forkserver(modules, env, o.cwd, spawn.command(o.launch, o.script, o.args), follow=follow)
        try:
            server.start()
        except OSError as exc:
            self._fallback(f"the forkserver could not start: {exc.strerror or exc}")
            return
        self.server = server

    @property
    def pid(self) -> int | None:
        """The forkserver's pid while it runs (the run's marks leave it out)."""
        return self.server.pid if self.server is not None else None

    def fds(self) -> list[int]:
        """What the serve loop's wait also wakes on: the forkserver's socket (ready, a worker's end)."""
        s = self.server
        return [s.sock.fileno()] if s is not None and s.sock is not None else []

    def loading(self) -> bool:
        """The forkserver still imports: the first launch waits for it."""
        self.tick()
        return self.server is not None and self.server.state == "loading"

    def tick(self) -> None:
        """Hear from the forkserver (each tick of the serve loop): ready, or gone."""
        s = self.server
        if s is None:
            return
        s.pump()
        if s.state == "ready" and not self.announced:
            self.announced = True
            self.log.event(Event.PRELOADED, pid=s.pid, modules=s.loaded,
                           seconds=round(s.info.get("seconds", 0), 2), tasks=s.info.get("tasks"))
        elif s.state == "failed":
            self._fallback(s.why or "the forkserver ended")
            self.server = None

    def start(self, argv: list[str], env: Mapping[str, str], stdout: IO[bytes], stderr: IO[bytes],
              cwd: str) -> ForkedProc | subprocess.Popen[bytes]:
        """The worker's process: forked where it can be, else exec'd (raises OSError as Popen does)."""
        s = self.server
        if s is not None and s.state == "ready":
            why = self._unlike(argv, env)
            got = s.spawn(argv, dict(env), stdout, stderr, cwd, self.opts.launch) if why is None else why
            if isinstance(got, ForkedProc):
                return got
            self._fallback(got)
            self.tick()
        return spawn.start_worker(argv, env, stdout, stderr, cwd=cwd)

    def _unlike(self, argv: list[str], env: Mapping[str, str]) -> str | None:
        """Why this worker would start unlike a fork of the forkserver, or None."""
        if not argv or argv[0] != sys.executable:
            return f"{argv[0] if argv else '?'} is not the preloaded interpreter ({sys.executable})"
        for key in sorted(set(env) | set(self.env)):
            if key.startswith(AT_START) and env.get(key) != self.env.get(key):
                return f"{key} differs from the forkserver's (the interpreter reads it as it starts)"
        return None

    def _fallback(self, why: str) -> None:
        """Said once a run: these workers start by exec."""
        if self.fell_back:
            return
        self.fell_back = True
        errors.LOG.info("workers start by exec, each importing for itself: %s", why)
        self.log.event(Event.PRELOAD_FALLBACK, why=why)

    def close(self) -> None:
        """At the run's end (its workers are gone): the forkserver ends with it."""
        if self.server is not None:
            self.server.close()
            self.server = None
