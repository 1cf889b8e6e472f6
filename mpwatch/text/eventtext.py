"""How events are worded for people: the one place for the headless status lines and the
TUI's notices (and their severity). Pure functions of an events.jsonl record; no textual,
no clock. Runs on whichever thread reads the event (the supervisor's loop for --headless
lines, the TUI's UI thread for notices).
"""
from __future__ import annotations

from typing import Literal

from mpwatch.contract.control import shown
from mpwatch.contract.culprit import ranks_text
from mpwatch.contract.status import Event, EventFields, State
from mpwatch.text import fmt

Severity = Literal["information", "warning", "error"]  # Textual's notification severities

# Events the TUI pops up as a notice; the others show in the table or the action's reply.
# (The run's end is no notice: the banner says it, once.)
NOTICE_EVENTS = frozenset({Event.WORKER_EXITED, Event.STALLED, Event.SLOW_START, Event.RECOVERED,
                           Event.RESTARTED, Event.RESIZED, Event.ALERT, Event.GPU_ALERT, Event.STOPPING,
                           Event.DUMP, Event.CHECKPOINT_MISSED, Event.PROFILE_WRITTEN, Event.PROFILE_FAILED,
                           Event.MEMORY_WRITTEN, Event.MEMORY_FAILED})
# a rank that took a request past its step is news too (contract.control: `late`)
LATE_NOTICES = frozenset({Event.CHECKPOINT_TAKEN, Event.TUNABLE_APPLIED, Event.PROFILE_STARTED})
_ALERT_SEVERITY: dict[str, Severity] = {"error": "error", "warning": "warning", "info": "information"}
_EXIT_SEVERITY: dict[str, Severity] = {State.FAILED: "error", State.KILLED: "warning"}
EXIT_GROUPS = 2  # causes one notice of ranks that ended together says, at most


def _who(rec: EventFields) -> str:
    r = rec.get("rank")
    return f"rank {r}" if r is not None else "run"


def exit_state(rec: EventFields) -> State:
    """A worker_exited's state; a worker that could not start is recorded without one."""
    return State.of(rec.get("state")) or (State.FAILED if rec.get("cause") else State.EXITED)


def doing(kind: str | None, detail: str | None) -> str:
    """What a stalled process does, once: the detail starts with its kind ("blocked: ...")."""
    if detail:
        return detail if not kind or detail.startswith(kind) else f"{kind}: {detail}"
    return kind or ""


def _stalled(rec: EventFields) -> str:
    what = doing(rec.get("kind"), rec.get("detail"))
    step = rec.get("step")
    at = f" (step {step})" if step is not None else ""
    return (f"{_who(rec)} stalled: no report for {fmt.age(rec.get('silent_for'))}{at}"
            + (f"; {what}" if what else ""))


def slow_start_text(limit: float | None) -> str:
    """The words of a slow start, as the issue fixed them: 'slow start: no first report after 10m'."""
    return f"slow start: no first report after {fmt.age(limit, '?')}"


def _slow_start(rec: EventFields) -> str:
    what = doing(rec.get("kind"), rec.get("detail"))
    return f"{_who(rec)} {slow_start_text(rec.get('limit'))}" + (f"; {what}" if what else "")


def _at(step: object) -> str:
    return f"at step {step}" if step is not None else "at its next call"


def _live(rec: EventFields) -> str | None:
    """Control's events (supervisor.control.room)."""
    e, who = rec.get("event"), _who(rec)
    late = f" (late: asked for step {rec.get('at')})" if rec.get("late") else ""
    if e == Event.CHECKPOINT_REQUESTED:
        return (f"checkpoint asked of {fmt.ranks(rec.get('ranks') or [])} {_at(rec.get('step'))} "
                f"by {rec.get('by')}")
    if e == Event.CHECKPOINT_TAKEN:
        return f"{who} took a checkpoint at step {fmt.num(rec.get('step'), na='-')}{late}"
    if e == Event.CHECKPOINT_MISSED:
        return f"{who} ended before its checkpoint ({rec.get('why')})"
    if e in (Event.PROFILE_REQUESTED, Event.PROFILE_STARTED, Event.PROFILE_WRITTEN, Event.PROFILE_FAILED,
             Event.PROFILE_MISSED):
        return _profile(rec)
    if e in (Event.MEMORY_REQUESTED, Event.MEMORY_STARTED, Event.MEMORY_WRITTEN, Event.MEMORY_FAILED,
             Event.MEMORY_MISSED):
        return _memory(rec)
    if e == Event.TUNABLE_DECLARED:
        return (f"{who} declared tunable {rec.get('tunable')} ({rec.get('type')}, "
                f"default {shown(rec.get('value'))})")
    if e == Event.TUNABLE_SET and rec.get("step") is not None:  # asked now, in force at that step
        return (f"{rec.get('tunable')} = {shown(rec.get('value'))} from step {rec.get('step')} "
                f"({shown(rec.get('old'))} until then) by {rec.get('by')}")
    if e == Event.TUNABLE_SET:
        return (f"{rec.get('tunable')} = {shown(rec.get('value'))} (was {shown(rec.get('old'))}) "
                f"{_at(rec.get('step'))} by {rec.get('by')}")
    if e == Event.TUNABLE_REFUSED:
        return f"{who}: tunable {rec.get('tunable')} refused: {rec.get('why')}"
    if e == Event.TUNABLE_APPLIED:
        return f"{who} took {rec.get('tunable')} = {shown(rec.get('value'))} at step {rec.get('step')}{late}"
    if e == Event.STOP_SIGNAL:
        return f"{who}: {rec.get('signal')} sent to pid {rec.get('pid')} ({rec.get('reason')}; " \
               f"SIGKILL after {rec.get('grace')}s)"
    return None


def _profile(rec: EventFields) -> str:
    """A profile's events (supervisor.control.actions)."""
    e, who, step = rec.get("event"), _who(rec), rec.get("step")
    if e == Event.PROFILE_REQUESTED:
        n = rec.get("steps")
        when = f"steps {step + 1}-{step + (n or 1)}" if step is not None else f"its next {n} steps"
        return f"profile of {when} asked of {fmt.ranks(rec.get('ranks') or [])} by {rec.get('by')}"
    if e == Event.PROFILE_STARTED:
        late = f" (late: asked for step {rec.get('at')})" if rec.get("late") else ""
        at = f"after step {step}" if step is not None else "now"
        return f"{who}: {rec.get('tool')} started {at}{late}"
    if e == Event.PROFILE_WRITTEN:
        note = f" ({rec.get('why')})" if rec.get("why") else ""
        return f"{who}: profile written, {rec.get('path')} ({fmt.size_long(rec.get('bytes'))}){note}"
    if e == Event.PROFILE_FAILED:
        return f"{who}: no profile: {rec.get('why')}"
    return f"{who} ended before its profile started"


def _alert(rec: EventFields) -> str | None:
    if rec.get("ended") and rec.get("kind") == "straggler":
        return f"rank {rec.get('rank')}: no longer the straggler"
    if rec.get("ended"):  # its ranks report again (their `recovered` lines say so)
        return None
    return f"alert{' (updated)' if rec.get('update') else ''}: {rec.get('message')}"


def _memory(rec: EventFields) -> str:
    """A CUDA memory snapshot's events (supervisor.control.actions, contract.actions' MEMORY)."""
    e, who, step = rec.get("event"), _who(rec), rec.get("step")
    if e == Event.MEMORY_REQUESTED:
        ranks = fmt.ranks(rec.get("ranks") or [])
        return f"CUDA memory snapshot asked of {ranks} {_at(step)} by {rec.get('by')}"
    if e == Event.MEMORY_STARTED:
        late = f" (late: asked for step {rec.get('at')})" if rec.get("late") else ""
        return f"{who}: CUDA memory snapshot taken at step {fmt.num(step, na='-')}{late}"
    if e == Event.MEMORY_WRITTEN:
        note = f" ({rec.get('why')})" if rec.get("why") else ""
        size = fmt.size_long(rec.get("bytes"))
        return f"{who}: CUDA memory snapshot written, {rec.get('path')} ({size}){note}"
    if e == Event.MEMORY_FAILED:
        return f"{who}: no CUDA memory snapshot: {rec.get('why')}"
    return f"{who} ended before its CUDA memory snapshot"


def line(rec: EventFields) -> str | None:
    """One line for an event (the --headless status line), or None for events not worth one."""
    e, who = rec.get("event"), _who(rec)
    if e == Event.RUN_STARTED:
        return (f"run started: {rec.get('nprocs')} workers of {rec.get('script')}; "
                f"files in {rec.get('run_dir')}")
    if e == Event.WORKER_STARTED:
        return f"{who} started again (pid {rec.get('pid')})" if rec.get("attempt") else None
    if e == Event.WORKER_EXITED:
        return _ended(who, exit_state(rec), str(rec.get("cause")))
    if e in (Event.PAUSED, Event.RESUMED):
        return f"{who} {e}"
    if e == Event.RESTARTED:
        return f"{who} restarted (restart {rec.get('attempt')}, {rec.get('why')})"
    if e == Event.RESIZED:
        return f"resized from {rec.get('frm')} to {rec.get('to')} workers ({rec.get('mode')})"
    if e == Event.STALLED:
        return _stalled(rec)
    if e == Event.SLOW_START:
        return _slow_start(rec)
    if e == Event.RECOVERED:
        return f"{who} recovered (step {rec.get('step')})"
    if e == Event.DUMP:  # only a stalled rank is stuck: a dump asked for finds a rank where it happens to be
        where, reason = rec.get("where"), rec.get("reason")
        why = ("" if reason == "stall" else " (asked for)" if reason == "request"
               else f" ({reason})" if reason else "")
        at = "stuck in" if reason == "stall" else "in"
        return f"{who} stack dump{why}: {rec.get('path')}" + (f", {at} {where}" if where else "")
    if e == Event.ALERT:
        return _alert(rec)
    if e == Event.GPU_ALERT:
        return f"GPU alert{' (updated)' if rec.get('update') else ''}: {rec.get('message')}"
    if e == Event.STOPPING:
        return f"stopping the run ({rec.get('why')})"
    if e == Event.RUN_FINISHED and rec.get("stopped"):  # a stop asked for, a signal: not a failure of its own
        return f"run stopped ({rec.get('stopped')}), exit code {rec.get('exit_code')}"
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
    return _live(rec)


def exits_notice(recs: list[EventFields]) -> tuple[str, Severity]:
    """One notice for several ranks that ended together (a process group failing at once, a
    restart or a resize that stops them all), with their causes, ranks of one cause together:
    'ranks 0,1,2 killed: stopped for a resize (exit 0)'. Past EXIT_GROUPS causes, the states
    only, and where each cause is: the events screen (the table shows a rank started again
    since as running, without the cause of its last end)."""
    by_cause: dict[tuple[str, str], list[int]] = {}
    for rec in recs:
        if rec["rank"] is not None:
            ranks = by_cause.setdefault((exit_state(rec), str(rec.get("cause") or "")), [])
            if rec["rank"] not in ranks:
                ranks.append(rec["rank"])
    states = {state for state, _ in by_cause}
    worst: Severity = ("error" if State.FAILED in states
                       else "warning" if State.KILLED in states else "information")
    if len(by_cause) <= EXIT_GROUPS:
        parts = [_ended(ranks_text(rs), state, cause) for (state, cause), rs in by_cause.items()]
        return "; ".join(parts), worst
    by_state: dict[str, list[int]] = {}
    for (state, _), rs in by_cause.items():
        by_state.setdefault(state, []).extend(r for r in rs if r not in by_state.get(state, []))
    return "; ".join(f"{ranks_text(rs)} {state}" for state, rs in by_state.items()) + \
        " (each one's cause: e, the events)", worst


def _ended(who: str, state: str, cause: str) -> str:
    """'rank 2 killed: killed on request (exit 0)' as line() words a worker_exited."""
    if not cause:
        return f"{who} {state}"
    return f"{who} {cause}" if cause.startswith(f"{state} ") else f"{who} {state}: {cause}"


def severity(rec: EventFields) -> Severity:
    e = rec.get("event")
    if e == Event.WORKER_EXITED:
        return _EXIT_SEVERITY.get(exit_state(rec), "information")
    if e == Event.RUN_FINISHED:
        return "information" if rec.get("exit_code") == 0 else "error"
    if e == Event.GPU_ALERT:
        return _ALERT_SEVERITY.get(rec.get("severity") or "warning", "warning")
    if e in (Event.STALLED, Event.SLOW_START, Event.RESTARTED, Event.ALERT, Event.STOPPING, Event.BAD_FRAME,
             Event.CHECKPOINT_MISSED, Event.REPORTS_REJECTED, Event.PROFILE_FAILED, Event.TUNABLE_REFUSED) \
            or rec.get("late"):
        return "warning"
    return "information"


def notice(rec: EventFields) -> tuple[str, Severity] | None:
    """(text, severity) of an event worth a notice in the TUI, else None. A failed worker's
    notice adds the last line of its stderr when the cause says no words of the process's own."""
    if rec.get("update"):  # an update shows in place, not as news
        return None
    if rec.get("event") not in NOTICE_EVENTS and not (rec.get("event") in LATE_NOTICES and rec.get("late")):
        return None
    text = line(rec)
    if text is None:
        return None
    if rec.get("event") == Event.WORKER_EXITED and exit_state(rec) == State.FAILED:
        tail = [ln.strip() for ln in rec.get("stderr_tail") or [] if ln.strip()]
        if tail and ": " not in (rec.get("cause") or ""):
            text += f"\n{tail[-1][:200]}"
    return text, severity(rec)
