"""Events as lines for the events screen and the replay's timeline strip: when (from the
run's start), who, what. The words are text.eventtext's (the headless lines' and notices');
the events it leaves unsaid (a first start, a report) get a plain line here, so that a
list of every event leaves none out (an alert that ended says which, and that it no longer
holds). Pure; UI thread.
"""
from __future__ import annotations

from mpwatch.contract import Event, EventFields
from mpwatch.text import eventtext, fmt
from mpwatch.tui.render.segs import Line, line

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "information": ""}


def at(ts: float, started: float | None) -> str:
    """A moment of the run from its start: +4.2s, +12m03s, +1h02m03s."""
    if started is None:
        return ""
    s = max(0.0, ts - started)
    return f"+{s:.1f}s" if s < 60 else "+" + fmt.duration(s)


def text(rec: EventFields) -> str:
    said = eventtext.line(rec)
    if said is not None:
        return said.splitlines()[0]
    who = f"rank {rec['rank']}" if rec.get("rank") is not None else "run"
    e = rec.get("event")
    if e == Event.ALERT and rec.get("ended"):  # which alert: the bare event read "run alert"
        return f"{rec.get('kind') or 'run'} alert no longer holds: {rec.get('message')}"
    if e == Event.WORKER_STARTED:
        return f"{who} started (pid {rec.get('pid')})"
    if e == Event.REPORT:
        return f"{who} step {fmt.num(rec.get('step'), na='-')} loss {fmt.num(rec.get('loss'), na='-')}"
    return f"{who} {e}"


def event_line(rec: EventFields, started: float | None) -> Line:
    style = SEVERITY_STYLE.get(eventtext.severity(rec), "")
    return line((f"{at(rec['ts'], started):>10} ", "bright_black"), (text(rec), style))
