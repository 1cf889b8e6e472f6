"""Status lines on stderr for --headless runs (batch jobs, CI): one line per notable
event as it happens, and a summary line every SUMMARY_S seconds. The Reporter runs on
the supervisor's main thread (ticks) and on any thread that records an event."""
from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, Protocol, TextIO, cast

from mpwatch.contract import EventFields, RunState, Status
from mpwatch.text import eventtext, fmt, safe

SUMMARY_S = 10.0


class Summarised(Protocol):
    """What a summary line reads of the run (supervisor.core's Run)."""

    @property
    def state(self) -> RunState: ...

    def snapshot(self) -> Status: ...


def describe(rec: Mapping[str, object]) -> str | None:
    """One human line for an event, or None for events not worth a line (text.eventtext
    words every event, for these lines and the TUI alike)."""
    return eventtext.line(cast(EventFields, rec))  # an events.jsonl record, as the run wrote it


class Reporter:
    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.next_summary = time.monotonic() + SUMMARY_S

    def _print(self, text: str) -> None:
        try:
            # one line whatever the text holds (a script named with a newline: '?' in its place)
            line = safe.printable(text, safe.LINE_WIDTH)
            self.stream.write(f"[mpwatch {time.strftime('%H:%M:%S')}] {line}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop the run

    def note(self, text: str) -> None:
        """A line of the supervisor's own, not an event's (the workers' OpenMP default)."""
        self._print(text)

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
