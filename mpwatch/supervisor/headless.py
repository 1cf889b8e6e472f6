"""Status lines on stderr for --headless runs (batch jobs, CI): one line per notable
event as it happens, and a summary line every SUMMARY_S seconds."""
from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import cast

from mpwatch import eventtext
from mpwatch.status import EventFields

SUMMARY_S = 10.0


def _fmt_loss(x):
    return "-" if x is None else f"{x:.4g}"


def describe(rec: Mapping[str, object]) -> str | None:
    """One human line for an event, or None for events not worth a line (mpwatch/eventtext.py
    words every event, for these lines and the TUI alike)."""
    return eventtext.line(cast(EventFields, rec))  # an events.jsonl record, as the run wrote it


class Reporter:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.next_summary = time.monotonic() + SUMMARY_S

    def _print(self, text: str):
        try:
            self.stream.write(f"[mpwatch {time.strftime('%H:%M:%S')}] {text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop the run

    def event(self, rec: dict):
        line = describe(rec)
        if line:
            self._print(line)

    def tick(self, run):
        now = time.monotonic()
        if now < self.next_summary or run.state == "finished":
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
            parts.append(f"loss {_fmt_loss(sum(losses) / len(losses))} (mean)")
        self._print(" · ".join(parts))
