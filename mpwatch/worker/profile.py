"""A profile of this process on demand (`mpwatch ctl profile`, the TUI's `o`): torch.profiler
from a step boundary for N steps, then a Chrome trace, gzipped, where the supervisor said
(rank-N/profiles/, through rundir.rank_files), and the top operators by self time.

Threads: `begin` and `Session.at_step` run on the training thread at step boundaries
(worker.actions: report() with a step, or the automatic steps' optimizer hook), so the
profiler starts and stops on the thread that trains; that is all the loop waits for (both
are timed: `held_ms`). The trace's export, its gzip and the operators' table (key_averages)
run on a thread of their own, "mpwatch-profile"; the result goes back through the control
state's outbox. A process that exits while a profile runs writes what it has (atexit).

Loaded by worker.actions when a profile is asked, in a process that imported torch; it never
imports torch itself (the script's own is in sys.modules).
"""
from __future__ import annotations

import atexit
import errno
import json
import sys
import threading
import time

from mpwatch.rundir.rank_files import RankFolder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mpwatch.worker.actions import Answers

STEPS_MAX = 50  # contract.actions.PROFILE_STEPS_MAX: the supervisor checks it; this is the worker's own guard
WALL_MAX_S = 300.0  # a profile still running after this stops at its next step boundary
TRACE_MAX = 512 << 20  # bytes of gzip: past it no trace is kept
TOP = 10
EXPORT_WAIT_S = 120.0  # at exit, a trace being written gets this long
NO_TORCH = "this process has not imported torch"
KINETO_TMP = ".tmp"  # Kineto writes a trace to its path and this, then renames it (torch 2.x)
_exports: list[threading.Thread] = []


def begin(answers: Answers, rid: int, at: int | None, step: int, frame: dict[str, object]) -> Session | None:
    """Training thread: start the profiler now (the boundary after `step`); None when it cannot
    (the result says why)."""
    torch: Any = sys.modules.get("torch")
    path, steps = frame.get("path"), frame.get("steps")
    if torch is None:  # py-spy instead, perhaps (supervisor.live.actions)
        answers.result(rid, {"state": "failed", "why": NO_TORCH, "no_torch": True})
        return None
    if type(path) is not str or type(steps) is not int or not 1 <= steps <= STEPS_MAX:
        answers.result(rid, {"state": "failed", "why": "a profile request of the wrong shape"})
        return None
    try:
        folder = RankFolder(path)
    except OSError as exc:
        answers.result(rid, {"state": "failed", "why": f"cannot write {path}: {exc.strerror or exc}"})
        return None
    tp = torch.profiler
    cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())  # CUDA where the rank uses it
    prof = tp.profile(activities=[tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if cuda else []))
    t0 = time.perf_counter()
    prof.start()
    held = time.perf_counter() - t0
    meta = {"rank": answers.rank, "request": rid, "after_step": step, "first_step": step + 1, "steps": steps}
    prof.add_metadata_json("mpwatch", json.dumps(meta))  # the trace says what it holds
    answers.answer(rid, at, step)
    return Session(answers, rid, prof, folder, step, steps, cuda, held)


class Session:
    """One profile under way (training thread)."""

    def __init__(self, answers: Answers, rid: int, prof: Any, folder: RankFolder, step: int, steps: int,
                 cuda: bool, held: float):
        self.answers = answers
        self.rid = rid
        self.prof = prof
        self.folder = folder
        self.first = step  # the step reported when it started: it holds the steps after it
        self.stop_at = step + steps
        self.asked = steps
        self.cuda = cuda
        self.held = held  # seconds the training thread waited for the profiler's start (and then stop)
        self.started = time.monotonic()
        self.next_step = step + 1  # every boundary: a slow loop stops at WALL_MAX_S

    def at_step(self, step: int) -> bool:
        over_time = time.monotonic() - self.started > WALL_MAX_S
        if step < self.stop_at and not over_time:
            self.next_step = step + 1
            return False
        note = f"cut at {WALL_MAX_S:.0f} s" if step < self.stop_at else None
        self._stop(min(step, self.stop_at) - self.first, note, wait=False)
        return True

    def at_exit(self) -> None:
        """The process exits while it runs: what it holds is written now."""
        self._stop(None, "cut short: the process ended", wait=True)

    def _stop(self, steps: int | None, note: str | None, wait: bool) -> None:
        t0 = time.perf_counter()
        self.prof.stop()
        self.held += time.perf_counter() - t0
        t = threading.Thread(target=self._export, args=(steps, note), name="mpwatch-profile", daemon=True)
        _exports.append(t)
        if len(_exports) == 1:
            atexit.register(_join_exports)
        t.start()
        if wait:
            t.join(EXPORT_WAIT_S)

    def _export(self, steps: int | None, note: str | None) -> None:
        """Its own thread: the trace written and gzipped, the top operators; the result."""
        folder, held_ms = self.folder, round(self.held * 1000, 1)
        scratch = None
        try:
            scratch, path = folder.scratch(".json")
            self.prof.export_chrome_trace(path)  # Kineto writes it (it replaces our empty file)
            if folder.size(scratch + KINETO_TMP) is not None or not folder.size(scratch):
                # it could not (a full disk): no error is raised, its temporary is left, ours stays empty
                raise OSError(errno.ENOSPC, "Kineto wrote no whole trace (is the disk full?)")
            size = folder.gzip_from(scratch, TRACE_MAX)
            fields: dict[str, object] = {"state": "written", "bytes": size, "steps": steps,
                                         "top": self._top(), "held_ms": held_ms, "tool": "torch.profiler"}
            if note:
                fields["why"] = note
        except Exception as exc:  # noqa: BLE001 - a failed export is the request's answer, not the loop's end
            why = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
            fields = {"state": "failed", "why": f"the trace was not written: {why}"[:300], "held_ms": held_ms}
        finally:
            if scratch is not None:  # ours, and Kineto's own temporary (it writes PATH.tmp, then renames):
                folder.remove(scratch)  # a full disk leaves that one behind, as big as the trace
                folder.remove(scratch + KINETO_TMP)
            folder.close()
        self.answers.result(self.rid, fields)

    def _top(self) -> list[list[object]]:
        """The operators by self time (on the GPU where the rank uses one), as contract.actions reads them."""
        rows: list[tuple[float, float, str, int]] = []
        for e in self.prof.key_averages():
            dev = getattr(e, "self_device_time_total", None)
            if dev is None:
                dev = getattr(e, "self_cuda_time_total", 0.0)  # torch before 2.4
            rows.append((float(dev or 0.0), float(e.self_cpu_time_total), str(e.key)[:160], int(e.count)))
        rows.sort(key=lambda r: (r[0], r[1]) if self.cuda else (r[1], r[0]), reverse=True)
        return [[name, round(cpu, 1), round(dev, 1) if self.cuda else None, calls]
                for dev, cpu, name, calls in rows[:TOP]]


def _join_exports() -> None:
    """At exit: traces being written are finished (bounded), before the sender's last flush."""
    deadline = time.monotonic() + EXPORT_WAIT_S
    for t in list(_exports):
        t.join(max(0.0, deadline - time.monotonic()))
