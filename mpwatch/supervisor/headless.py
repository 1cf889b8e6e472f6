"""Status lines on stderr for --headless runs (batch jobs, CI): one line per notable
event as it happens, and a summary line every SUMMARY_S seconds. The Reporter runs on
the supervisor's main thread (ticks) and on any thread that records an event."""
from __future__ import annotations

import sys
import time
from typing import Any, Protocol, TextIO

from mpwatch import fmt
from mpwatch.status import RunState, Status

SUMMARY_S = 10.0


class Summarised(Protocol):
    """What a summary line reads of the run (supervisor/core.py's Run)."""

    @property
    def state(self) -> RunState: ...

    def snapshot(self) -> Status: ...


def describe(rec: dict) -> str | None:
    """One human line for an event, or None for events not worth a line."""
    e, r = rec.get("event"), rec.get("rank")
    who = f"rank {r}" if r is not None else "run"
    if e == "run_started":
        return f"run started: {rec.get('nprocs')} workers of {rec.get('script')}; files in {rec.get('run_dir')}"
    if e == "worker_started":
        return None if not rec.get("attempt") else f"{who} started again (pid {rec.get('pid')})"
    if e == "worker_exited":
        return f"{who} {rec.get('state')}: {rec.get('cause')}"
    if e in ("paused", "resumed"):
        return f"{who} {e}"
    if e == "restarted":
        return f"{who} restarted (restart {rec.get('attempt')}, {rec.get('why')})"
    if e == "resized":
        return f"resized from {rec.get('frm')} to {rec.get('to')} workers ({rec.get('mode')})"
    if e == "stalled":
        what = f"; {rec['kind']}" + (f" ({rec['detail']})" if rec.get("detail") else "") if rec.get("kind") else ""
        return f"{who} stalled: no report for {rec.get('silent_for')}s (step {rec.get('step')}){what}"
    if e == "recovered":
        return f"{who} recovered (step {rec.get('step')})"
    if e == "dump":
        where = f", stuck in {rec['where']}" if rec.get("where") else ""
        return f"{who} stack dump: {rec.get('path')}{where}"
    if e == "alert":
        return f"alert: {rec.get('message')}"
    if e == "gpu_alert":
        return f"GPU alert: {rec.get('message')}"
    if e == "stopping":
        return f"stopping the run ({rec.get('why')})"
    if e == "run_finished":
        return f"run finished, exit code {rec.get('exit_code')}"
    if e == "bad_frame":
        return f"{who}: dropped a bad frame ({rec.get('why')}), {rec.get('count')} so far"
    return None


class Reporter:
    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.next_summary = time.monotonic() + SUMMARY_S

    def _print(self, text: str) -> None:
        try:
            self.stream.write(f"[mpwatch {time.strftime('%H:%M:%S')}] {text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop the run

    def event(self, rec: dict[str, Any]) -> None:
        line = describe(rec)
        if line:
            self._print(line)

    def tick(self, run: Summarised) -> None:
        """A summary line once every SUMMARY_S: workers by state, the step range, the mean loss."""
        now = time.monotonic()
        if now < self.next_summary or run.state is RunState.FINISHED:
            return
        self.next_summary = now + SUMMARY_S
        snap = run.snapshot()
        counts = ", ".join(f"{n} {s}" for s, n in sorted(snap["run"]["counts"].items()))
        steps = [w["step"] for w in snap["workers"] if w["step"] is not None]
        losses = [w["loss"] for w in snap["workers"] if w["loss"] is not None]
        parts = [counts or "no workers"]
        if steps:
            parts.append(f"step {min(steps)}" + (f"..{max(steps)}" if max(steps) != min(steps) else ""))
        if losses:
            parts.append(f"loss {fmt.num(sum(losses) / len(losses), na='-')} (mean)")
        self._print(" · ".join(parts))
