"""A profile by py-spy: a flame graph of N seconds of a rank that torch.profiler cannot reach
(its process never imported torch, or has no channel to mpwatch), where py-spy is installed and
MPWATCH_PYSPY is not off. supervisor.live.actions asks for it; here it runs on a thread of its
own ("mpwatch-flame"), since it takes its seconds.

The SVG goes to rank-N/profiles/<stem>.svg: py-spy writes into a new hidden file made under
the writer's rules (rundir.rank_files: 0600, never through a link), reached through this
process's fd (/proc/self/fd, passed to py-spy), which is given its name (never over another
file) once py-spy has written a flame graph. py-spy carries the run's marks in its environment,
so the watchdog ends it with the run (supervisor.workers.marks).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable

from mpwatch.contract import FileResult, protocol
from mpwatch.probes import pyspy
from mpwatch.rundir import layout
from mpwatch.rundir.rank_files import RankFolder
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import PySpy
from mpwatch.supervisor import boundary
from mpwatch.supervisor.live.records import Asked
from mpwatch.supervisor.workers.worker import Worker

SECONDS_MAX = 50  # contract.actions.PROFILE_STEPS_MAX: --steps N is N seconds here
HEAD = 512  # bytes read back to see that py-spy wrote a flame graph


class FlameRecorder:
    def __init__(self, store: RunStore, policy: PySpy, run_id: str):
        self.store = store
        self.policy = policy  # MPWATCH_PYSPY
        self.run_id = run_id
        # One recording of a rank at a time (py-spy's sampling of a process is no cheaper twice):
        # a request for a rank being recorded is refused, and its answer says why.
        self._lock = threading.Lock()
        self._busy: set[int] = set()

    def refusal(self) -> str | None:
        """Why there is no py-spy profile here, or None."""
        if self.policy == "off":
            return "py-spy is off (MPWATCH_PYSPY=off)"
        if pyspy.find() is None:
            return "py-spy is not installed (pip install py-spy)"
        return None

    def record(self, w: Worker, req: Asked, done: Callable[[FileResult, Asked], None]) -> None:
        """Start the recording of rank w's process; `done` gets its outcome (on its thread)."""
        pid, seconds = w.pid, max(1, min(int(req.args.get("steps", 1)), SECONDS_MAX))
        rel = req.paths.get(w.rank)
        if pid is None or rel is None:
            done(_failed(w.rank, rel, "its process is gone"), req)
            return
        final = rel.removesuffix(layout.TRACE_SUFFIX) + layout.FLAME_SUFFIX
        with self._lock:
            busy = w.rank in self._busy
            self._busy.add(w.rank)
        if busy:
            done(_failed(w.rank, final, f"a py-spy profile of rank {w.rank} is running: one at a time"), req)
            return
        threading.Thread(target=self._guarded, args=(w.rank, pid, seconds, final, req, done),
                         name="mpwatch-flame", daemon=True).start()

    def _guarded(self, rank: int, pid: int, seconds: int, final: str, req: Asked,
                 done: Callable[[FileResult, Asked], None]) -> None:
        try:
            self._run(rank, pid, seconds, final, req, done)
        except Exception as exc:  # noqa: BLE001 - a bug here is the request's answer, and supervisor.log's
            done(_failed(rank, final, boundary.failed("py-spy profiles", exc, "a py-spy profile")), req)
        finally:
            with self._lock:
                self._busy.discard(rank)

    def _run(self, rank: int, pid: int, seconds: int, final: str, req: Asked,
             done: Callable[[FileResult, Asked], None]) -> None:
        try:
            folder = RankFolder(str(self.store.dir / final))
        except OSError as exc:
            done(_failed(rank, final, f"cannot write {final}: {exc.strerror or exc}"), req)
            return
        with folder:
            part, fd = folder.new(layout.PART_SUFFIX)
            env = {**os.environ, protocol.ENV_RUN: self.run_id, protocol.ENV_SUPERVISOR_PID: str(os.getpid())}
            try:
                try:
                    ok, why = pyspy.record(pid, seconds, f"/proc/self/fd/{fd}", (fd,), env)
                    size = os.fstat(fd).st_size
                finally:
                    os.close(fd)
                if ok and (not size or b"<svg" not in folder.head(part, HEAD)):
                    ok, why = False, "py-spy wrote no flame graph"
                if ok:
                    folder.publish(part)  # never over a file at its name
            except OSError as exc:
                ok, why = False, f"cannot write {final}: {exc.strerror or exc}"
            finally:
                folder.remove(part)
        if not ok:
            done(_failed(rank, final, why or "py-spy failed"), req)
            return
        done(FileResult(rank=rank, state="written", tool="py-spy", path=final, bytes=size,
                        why=f"{seconds} s sampled", steps=None, top=[], held_ms=None), req)


def _failed(rank: int, path: str | None, why: str) -> FileResult:
    return FileResult(rank=rank, state="failed", tool="py-spy", path=path, bytes=None, why=why, steps=None,
                      top=[], held_ms=None)
