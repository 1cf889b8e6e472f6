"""How events are worded for people: the one place for the headless status lines and the
TUI's notices (and their severity). Pure functions of an events.jsonl record; no textual,
no clock. Runs on whichever thread reads the event (the supervisor's loop for --headless
lines, the TUI's UI thread for notices).
"""
from __future__ import annotations

from typing import Literal

from mpwatch.contract.status import Event, EventFields, State

Severity = Literal["information", "warning", "error"]  # Textual's notification severities

# Events the TUI pops up as a notice; the others show in the table or the action's reply.
NOTICE_EVENTS = frozenset({Event.WORKER_EXITED, Event.STALLED, Event.RECOVERED, Event.RESTARTED,
                           Event.RESIZED, Event.ALERT, Event.GPU_ALERT, Event.STOPPING, Event.DUMP,
                           Event.RUN_FINISHED})
_ALERT_SEVERITY: dict[str, Severity] = {"error": "error", "warning": "warning", "info": "information"}
_EXIT_SEVERITY: dict[str, Severity] = {State.FAILED: "error", State.KILLED: "warning"}


def _who(rec: EventFields) -> str:
    r = rec.get("rank")
    return f"rank {r}" if r is not None else "run"


def exit_state(rec: EventFields) -> State:
    """A worker_exited's state; a worker that could not start is recorded without one."""
    return State.of(rec.get("state")) or (State.FAILED if rec.get("cause") else State.EXITED)


def _stalled(rec: EventFields) -> str:
    kind = rec.get("kind")
    what = ""
    if kind:
        detail = rec.get("detail")
        what = f"; {kind}" + (f" ({detail})" if detail else "")
    return f"{_who(rec)} stalled: no report for {rec.get('silent_for')}s (step {rec.get('step')}){what}"


def line(rec: EventFields) -> str | None:
    """One line for an event (the --headless status line), or None for events not worth one."""
    e, who = rec.get("event"), _who(rec)
    if e == Event.RUN_STARTED:
        return (f"run started: {rec.get('nprocs')} workers of {rec.get('script')}; "
                f"files in {rec.get('run_dir')}")
    if e == Event.WORKER_STARTED:
        return f"{who} started again (pid {rec.get('pid')})" if rec.get("attempt") else None
    if e == Event.WORKER_EXITED:
        return f"{who} {exit_state(rec)}: {rec.get('cause')}"
    if e in (Event.PAUSED, Event.RESUMED):
        return f"{who} {e}"
    if e == Event.RESTARTED:
        return f"{who} restarted (restart {rec.get('attempt')}, {rec.get('why')})"
    if e == Event.RESIZED:
        return f"resized from {rec.get('frm')} to {rec.get('to')} workers ({rec.get('mode')})"
    if e == Event.STALLED:
        return _stalled(rec)
    if e == Event.RECOVERED:
        return f"{who} recovered (step {rec.get('step')})"
    if e == Event.DUMP:
        where = rec.get("where")
        return f"{who} stack dump: {rec.get('path')}" + (f", stuck in {where}" if where else "")
    if e == Event.ALERT:
        return f"alert: {rec.get('message')}"
    if e == Event.GPU_ALERT:
        return f"GPU alert: {rec.get('message')}"
    if e == Event.STOPPING:
        return f"stopping the run ({rec.get('why')})"
    if e == Event.RUN_FINISHED:
        return f"run finished, exit code {rec.get('exit_code')}"
    if e == Event.ROUND:  # several nodes: a rendezvous round joined (node_lost is worded by its alert)
        first, last = rec.get("base_rank", 0), rec.get("base_rank", 0) + rec.get("nprocs", 1) - 1
        return (f"round {rec.get('round')}: node {rec.get('node_rank')} of {rec.get('nnodes')}, global ranks "
                f"{first}-{last} of {rec.get('world_size')} ({rec.get('why')})")
    if e == Event.BAD_FRAME:
        return f"{who}: dropped a bad frame ({rec.get('why')}), {rec.get('count')} so far"
    if e == Event.REPORTS_REJECTED:
        return f"{who}: {rec.get('count')} report(s) rejected so far: {rec.get('why')}"
    return None


def severity(rec: EventFields) -> Severity:
    e = rec.get("event")
    if e == Event.WORKER_EXITED:
        return _EXIT_SEVERITY.get(exit_state(rec), "information")
    if e == Event.RUN_FINISHED:
        return "information" if rec.get("exit_code") == 0 else "error"
    if e == Event.GPU_ALERT:
        return _ALERT_SEVERITY.get(rec.get("severity") or "warning", "warning")
    if e in (Event.STALLED, Event.RESTARTED, Event.ALERT, Event.STOPPING, Event.BAD_FRAME, Event.REPORTS_REJECTED):
        return "warning"
    return "information"


def notice(rec: EventFields) -> tuple[str, Severity] | None:
    """(text, severity) of an event worth a notice in the TUI, else None. A failed worker's
    notice adds the last line of its stderr when the cause does not already hold it."""
    if rec.get("event") not in NOTICE_EVENTS:
        return None
    text = line(rec)
    if text is None:
        return None
    if rec.get("event") == Event.WORKER_EXITED and exit_state(rec) == State.FAILED:
        tail = [ln.strip() for ln in rec.get("stderr_tail") or [] if ln.strip()]
        if tail and tail[-1] not in (rec.get("cause") or ""):
            text += f"\n{tail[-1][:200]}"
    return text, severity(rec)
