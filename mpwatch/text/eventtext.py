"""How events are worded for people: the one place for the headless status lines and the
TUI's notices (and their severity). Pure functions of an events.jsonl record; no textual,
no clock. Runs on whichever thread reads the event (the supervisor's loop for --headless
lines, the TUI's UI thread for notices).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, cast

from mpwatch.contract import (
    CHECKPOINT,
    MEMORY,
    PROFILE,
    Action,
    Event,
    EventFields,
    State,
    as_float,
    as_int,
    ranks_text,
    shown,
    slowdown,
)
from mpwatch.text import fmt, slowdown_text
from mpwatch.text.run_end import run_ended

Severity = Literal["information", "warning", "error"]  # Textual's notification severities

# Events the TUI pops up as a notice; the others show in the table or the action's reply.
# (The run's end is no notice: the banner says it, once.)
NOTICE_EVENTS = frozenset({Event.WORKER_EXITED, Event.STALLED, Event.SLOW_START, Event.RECOVERED,
                           Event.RESTARTED, Event.RESIZED, Event.ALERT, Event.GPU_ALERT, Event.STOPPING,
                           Event.DUMP, Event.CHECKPOINT_MISSED, Event.PROFILE_WRITTEN, Event.PROFILE_FAILED,
                           Event.MEMORY_WRITTEN, Event.MEMORY_FAILED})
# a rank that took a request past its step is news too (contract.live: `late`)
LATE_NOTICES = frozenset({Event.CHECKPOINT_TAKEN, Event.TUNABLE_APPLIED, Event.PROFILE_STARTED})
_ALERT_SEVERITY: dict[str, Severity] = {"error": "error", "warning": "warning", "info": "information"}
_EXIT_SEVERITY: dict[str, Severity] = {State.FAILED: "error", State.KILLED: "warning"}
EXIT_GROUPS = 2  # causes one notice of ranks that ended together says, at most


# The fields worded here, by type: a record read from a crafted events.jsonl (the replay) or
# another machine may hold anything in any of them; each is taken as its type or as none.
_STR = ("kind", "detail", "cause", "why", "by", "tool", "path", "tunable", "type", "signal", "reason",
        "message", "mode", "script", "run_dir", "severity", "state", "where", "stopped")
_INT = ("step", "steps", "at", "pid", "attempt", "frm", "to", "exit_code", "count", "base_rank", "nprocs",
        "round", "node_rank", "nnodes", "world_size", "bytes")
_NUM = ("silent_for", "limit", "grace")


def typed(rec: EventFields) -> EventFields:
    """The record with each field this module words of its type, or none (never a TypeError
    deep in a sentence: `"detail": [null]`, `"step": "x"`)."""
    out: dict[str, object] = dict(rec)
    for k in _STR:
        if k in out and not isinstance(out[k], str):
            out[k] = None
    for k in _INT:
        if k in out:
            out[k] = as_int(out[k])
    for k in _NUM:
        if k in out and as_float(out[k]) is None:  # (a number kept as written: 10 says "10s")
            out[k] = None
    for k, kind in (("ranks", int), ("stderr_tail", str)):
        if k in out:
            v = out[k]
            out[k] = [x for x in v if type(x) is kind] if isinstance(v, list) else []
    out["rank"] = as_int(out.get("rank"))
    return cast(EventFields, out)


def _who(rec: EventFields) -> str:
    r = rec.get("rank")
    return f"rank {r}" if r is not None else "run"


def exit_state(rec: EventFields) -> State:
    """A worker_exited's state; a worker that could not start is recorded without one."""
    return State.of(rec.get("state")) or (State.FAILED if rec.get("cause") else State.EXITED)


def first_failure(recs: Iterable[EventFields]) -> tuple[int, str] | None:
    """The rank that failed first and its cause, from the run's events (text.run_end says it)."""
    for rec in recs:
        rank = rec.get("rank")
        if rec["event"] == Event.WORKER_EXITED and isinstance(rank, int) and exit_state(rec) == State.FAILED:
            return rank, str(rec.get("cause") or "failed")
    return None


def _one_failure(workers: object) -> tuple[int, str] | None:
    """run_finished's ranks: the one that failed, where one alone did (which failed first of
    several, its exit events say: text.run_end's callers that have them)."""
    if not isinstance(workers, dict):
        return None
    failed = [(int(r), str(w.get("cause") or "failed")) for r, w in workers.items()
              if isinstance(w, dict) and w.get("state") == State.FAILED and str(r).isdecimal()
              and len(str(r)) < 8]
    return failed[0] if len(failed) == 1 else None


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


def _late(rec: EventFields) -> str:
    """A rank that took a request past its step says so (contract.live: `late`)."""
    return f" (late: asked for step {rec.get('at')})" if rec.get("late") else ""


def _live(rec: EventFields) -> str | None:
    """The live requests' events (supervisor.live): each action's, the tunables', a stop signal."""
    e = rec.get("event")
    if e in CHECKPOINT.events:
        return _checkpoint(rec)
    if e in PROFILE.events:
        return _profile(rec)
    if e in MEMORY.events:
        return _memory(rec)
    if e == Event.STOP_SIGNAL:
        return f"{_who(rec)}: {rec.get('signal')} sent to pid {rec.get('pid')} ({rec.get('reason')}; " \
               f"SIGKILL after {rec.get('grace')}s)"
    return _tunable(rec)


def _checkpoint(rec: EventFields) -> str:
    e, who = rec.get("event"), _who(rec)
    if e == Event.CHECKPOINT_REQUESTED:
        return (f"checkpoint asked of {fmt.ranks(rec.get('ranks') or [])} {_at(rec.get('step'))} "
                f"by {rec.get('by')}")
    if e == Event.CHECKPOINT_TAKEN:
        return f"{who} took a checkpoint at step {fmt.num(rec.get('step'), na='-')}{_late(rec)}"
    return f"{who} ended before its checkpoint ({rec.get('why')})"


def _tunable(rec: EventFields) -> str | None:
    who, name, step = _who(rec), rec.get("tunable"), rec.get("step")
    value, old, by = shown(rec.get("value")), shown(rec.get("old")), rec.get("by")
    match rec.get("event"):
        case Event.TUNABLE_DECLARED:
            return f"{who} declared tunable {name} ({rec.get('type')}, default {value})"
        case Event.TUNABLE_SET if step is not None:  # asked now, in force at that step
            return f"{name} = {value} from step {step} ({old} until then) by {by}"
        case Event.TUNABLE_SET:
            return f"{name} = {value} (was {old}) {_at(step)} by {by}"
        case Event.TUNABLE_REFUSED:
            return f"{who}: tunable {name} refused: {rec.get('why')}"
        case Event.TUNABLE_APPLIED:
            return f"{who} took {name} = {value} at step {step}{_late(rec)}"
    return None


def _outcome(rec: EventFields, action: Action, what: str) -> str | None:
    """An action's outcome (a profile's, a CUDA memory snapshot's): its file written, or why none
    was; None for its other events."""
    e, who = rec.get("event"), _who(rec)
    if e == action.written:
        note = f" ({rec.get('why')})" if rec.get("why") else ""
        return f"{who}: {what} written, {rec.get('path')} ({fmt.size_long(rec.get('bytes'))}){note}"
    if e == action.failed:
        return f"{who}: no {what}: {rec.get('why')}"
    return None


def _profile(rec: EventFields) -> str:
    """A profile's events (supervisor.live.actions)."""
    e, who, step = rec.get("event"), _who(rec), rec.get("step")
    if e == Event.PROFILE_REQUESTED:
        n = rec.get("steps")
        when = f"steps {step + 1}-{step + (n or 1)}" if step is not None else f"its next {n} steps"
        return f"profile of {when} asked of {fmt.ranks(rec.get('ranks') or [])} by {rec.get('by')}"
    if e == Event.PROFILE_STARTED:
        at = f"after step {step}" if step is not None else "now"
        return f"{who}: {rec.get('tool')} started {at}{_late(rec)}"
    return _outcome(rec, PROFILE, "profile") or f"{who} ended before its profile started"


def _alert(rec: EventFields) -> str | None:
    if rec.get("ended") and rec.get("kind") == "straggler":
        return f"rank {rec.get('rank')}: no longer the straggler"
    if rec.get("ended") and rec.get("kind") == "slowdown":
        return slowdown_text.ended(slowdown.read_info(rec.get("slowdown")))
    if rec.get("ended"):  # its ranks report again (their `recovered` lines say so)
        return None
    return f"alert{' (updated)' if rec.get('update') else ''}: {rec.get('message')}"


def _memory(rec: EventFields) -> str:
    """A CUDA memory snapshot's events (supervisor.live.actions, contract.actions' MEMORY)."""
    e, who, step = rec.get("event"), _who(rec), rec.get("step")
    if e == Event.MEMORY_REQUESTED:
        ranks = fmt.ranks(rec.get("ranks") or [])
        return f"CUDA memory snapshot asked of {ranks} {_at(step)} by {rec.get('by')}"
    if e == Event.MEMORY_STARTED:
        return f"{who}: CUDA memory snapshot taken at step {fmt.num(step, na='-')}{_late(rec)}"
    return _outcome(rec, MEMORY, "CUDA memory snapshot") or f"{who} ended before its CUDA memory snapshot"


def line(rec: EventFields) -> str | None:
    """One line for an event (the --headless status line), or None for events not worth one."""
    rec = typed(rec)
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
    if e == Event.RUN_FINISHED:  # a stop asked for, a signal: not a failure of its own (text.run_end)
        stopped, code = rec.get("stopped"), rec.get("exit_code")
        return run_ended(code if isinstance(code, int) else None, stopped=str(stopped) if stopped else None,
                         failure=_one_failure(rec.get("workers")))
    if e == Event.ROUND:  # several nodes: a rendezvous round joined (node_lost is worded by its alert)
        first = rec.get("base_rank") or 0
        last = first + (rec.get("nprocs") or 1) - 1
        return (f"round {rec.get('round')}: node {rec.get('node_rank')} of {rec.get('nnodes')}, global ranks "
                f"{first}-{last} of {rec.get('world_size')} ({rec.get('why')})")
    if e == Event.BAD_FRAME:
        return f"{who}: dropped a bad frame ({rec.get('why')}), {rec.get('count')} so far"
    if e == Event.REPORTS_REJECTED:
        return f"{who}: {rec.get('count')} report(s) rejected so far: {rec.get('why')}"
    if e == Event.BAD_INPUT:
        return f"{who}: {rec.get('count')} bad input(s) so far; the latest, {rec.get('what')}: " \
            f"{rec.get('why')}"
    if e == Event.CHANNEL_REFUSED:
        return f"a channel that said it was {who} was refused ({rec.get('why')}), {rec.get('count')} so far"
    if e == Event.ROOM_FAILED:
        return f"the supervisor's {rec.get('room')} failed ({rec.get('why')}; see supervisor.log); " \
            "the run goes on"
    return _preload(rec) if e in (Event.PRELOADED, Event.PRELOAD_FALLBACK) else _live(rec)


def _preload(rec: EventFields) -> str:
    """The forkserver (supervisor.preload): ready, or the workers start by exec after all."""
    if rec.get("event") == Event.PRELOADED:
        return (f"workers start forked from one process that imported {', '.join(rec.get('modules') or [])} "
                f"once ({fmt.num(rec.get('seconds'), na='?')} s; pid {rec.get('pid')})")
    return f"workers start by exec, each importing for itself: {rec.get('why')}"


def exits_notice(recs: list[EventFields]) -> tuple[str, Severity]:
    """One notice for several ranks that ended together (a process group failing at once, a
    restart or a resize that stops them all), with their causes, ranks of one cause together:
    'ranks 0,1,2 killed: stopped for a resize (exit 0)'. Past EXIT_GROUPS causes, the states
    only, and where each cause is: the events screen (the table shows a rank started again
    since as running, without the cause of its last end)."""
    by_cause: dict[tuple[str, str], list[int]] = {}
    for rec in map(typed, recs):
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
    rec = typed(rec)
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


def headline(message: str) -> str:
    """A finding's first words, before its numbers: up to its first ': ', '; ' or ' ('."""
    cuts = [i for i in (message.find(": "), message.find("; "), message.find(" (")) if i > 0]
    return message[:min(cuts)] if cuts else message


def notice(rec: EventFields) -> tuple[str, Severity] | None:
    """(text, severity) of an event worth a notice in the TUI, else None. A failed worker's
    notice adds the last line of its stderr when the cause says no words of the process's own.
    A new alert's says its headline only: the TUI shows the finding whole, once, with the
    status's numbers, under its table (tui.render.findings)."""
    rec = typed(rec)
    if rec.get("update"):  # an update shows in place, not as news
        return None
    if rec.get("event") not in NOTICE_EVENTS and not (rec.get("event") in LATE_NOTICES and rec.get("late")):
        return None
    if rec.get("event") in (Event.ALERT, Event.GPU_ALERT) and not rec.get("ended"):
        what = "GPU alert" if rec.get("event") == Event.GPU_ALERT else "alert"
        return f"{what}: {headline(str(rec.get('message')))} (whole under the table; a: every alert)", \
            severity(rec)
    text = line(rec)
    if text is None:
        return None
    if rec.get("event") == Event.WORKER_EXITED and exit_state(rec) == State.FAILED:
        tail = [ln.strip() for ln in rec.get("stderr_tail") or [] if ln.strip()]
        if tail and ": " not in (rec.get("cause") or ""):
            text += f"\n{tail[-1][:200]}"
    return text, severity(rec)
