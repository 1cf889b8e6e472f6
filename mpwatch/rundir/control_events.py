"""The tunables and the actions' requests (checkpoints, profiles, memory snapshots) of a recorded run, folded
from its events (supervisor.control writes them: tunable_declared, tunable_set, tunable_applied,
and each action's requested, started, written, failed and missed: contract.actions' table) into
the records the live status has (contract.control): the replay shows a moment's
(sources.replay.fold), `summary` the run's (rundir.postmortem). Pure; fed the events in the
order they were written. A change for a later step is in force once every rank it was asked
of took it (the live status also stops waiting for a rank whose process ended: the events do
not say when one was asked again).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from mpwatch.contract.actions import ACTIONS, KEPT, Action, ActionRequest, read_result, record
from mpwatch.contract.coerce import as_int, as_str
from mpwatch.contract.control import (
    TUNABLE_KINDS,
    ControlView,
    RankAnswer,
    TunableType,
    value_of,
)
from mpwatch.contract.status import Event, EventFields, TunableChange, TunableStatus

CHANGES_KEPT = 8  # as supervisor.control.records keeps
_BY_EVENT: dict[str, Action] = {e: a for a in ACTIONS.values() for e in a.events}
CONTROL_EVENTS = frozenset({Event.TUNABLE_DECLARED, Event.TUNABLE_SET, Event.TUNABLE_APPLIED, *_BY_EVENT})


@dataclass
class ControlFold:
    tunables: dict[str, TunableStatus] = field(default_factory=dict)
    # each action's requests (contract.actions.record's), by its name, then by id, oldest first
    requests: dict[str, dict[int, ActionRequest]] = field(default_factory=lambda: {a: {} for a in ACTIONS})

    def status(self) -> ControlView:
        return ControlView([self.tunables[n] for n in sorted(self.tunables)],
                           {a: list(reqs.values())[-KEPT:] for a, reqs in self.requests.items()})


def _ranks(raw: object) -> list[int]:
    return sorted(x for x in raw if type(x) is int) if isinstance(raw, list) else []


def _answer(e: EventFields, answers: list[RankAnswer], waiting: list[int]) -> None:
    r = e["rank"]
    if r is None or any(a["rank"] == r for a in answers):
        return
    answers.append(RankAnswer(rank=r, step=as_int(e.get("step")), late=e.get("late") is True))
    answers.sort(key=lambda a: a["rank"])
    if r in waiting:
        waiting.remove(r)


def _tunable(live: ControlFold, e: EventFields, raw: dict[str, Any]) -> None:
    name, kind = as_str(raw.get("tunable")), as_str(raw.get("type"))
    t = live.tunables.get(name or "")
    if e["event"] == Event.TUNABLE_DECLARED and name and t is None and kind in TUNABLE_KINDS:
        default = value_of(kind, raw.get("value"))
        if default is not None:
            live.tunables[name] = TunableStatus(name=name, type=cast(TunableType, kind), default=default,
                                                value=default, ranks=[] if e["rank"] is None else [e["rank"]],
                                                changes=[])
    elif e["event"] == Event.TUNABLE_DECLARED and t is not None and e["rank"] is not None:
        t["ranks"] = sorted(set(t["ranks"]) | {e["rank"]})
    elif e["event"] == Event.TUNABLE_SET and t is not None:
        value, old = value_of(t["type"], raw.get("value")), value_of(t["type"], raw.get("old"))
        rid = as_int(e.get("id"))
        if value is None or rid is None:
            return
        step, asked = as_int(e.get("step")), _ranks(raw.get("ranks"))
        pending = step is not None and bool(asked)  # as supervisor.control.records decides
        t["changes"] = (t["changes"] + [TunableChange(
            id=rid, ts=e["ts"], value=value, old=t["value"] if old is None else old, step=step,
            by=as_str(raw.get("by")) or "?", answers=[], waiting=asked, pending=pending)])[-CHANGES_KEPT:]
        if not pending:
            t["value"] = value
        t["ranks"] = sorted(set(t["ranks"]) | set(asked))  # the events name the first only
    elif e["event"] == Event.TUNABLE_APPLIED and t is not None:
        c = next((c for c in t["changes"] if c["id"] == as_int(e.get("id"))), None)
        if c is not None:
            _answer(e, c["answers"], c["waiting"])
            if c["pending"] and c["answers"] and not c["waiting"]:  # every rank asked took it: in force
                c["pending"] = False
                t["value"] = c["value"]


def apply(live: ControlFold, e: EventFields) -> None:
    """One control event into the fold."""
    action = _BY_EVENT.get(e["event"])
    if action is None:
        _tunable(live, e, cast(dict[str, Any], e))
        return
    raw = cast(dict[str, Any], e)
    rid, name = as_int(e.get("id")), e["event"]
    reqs = live.requests[action.name]
    if name == action.requested and rid is not None:
        ranks, by = _ranks(raw.get("ranks")), as_str(raw.get("by")) or "?"
        asked = ActionRequest(id=rid, ts=e["ts"], by=by, step=as_int(e.get("step")), ranks=ranks,
                              answers=[], waiting=list(ranks), missed=[])
        reqs[rid] = record(action, asked, raw, [])  # its arguments are the event's fields
        return
    req: Any = reqs.get(rid) if rid is not None else None
    rank = e["rank"]
    if req is None or rank is None:
        return
    if name == action.started:
        _answer(e, req["answers"], req["waiting"] if not action.has_outcome else [])
    elif name == action.missed and rank in req["waiting"]:
        req["waiting"].remove(rank)
        req["missed"] = sorted(req["missed"] + [rank])
    elif name in (action.written, action.failed) and "results" in req:
        fields = {**raw, "state": "written" if name == action.written else "failed"}
        result = read_result(rank, fields, as_str(raw.get("tool")) or "?", as_str(raw.get("path")))
        req["results"] = sorted([r for r in req["results"] if r["rank"] != rank] + [result],
                                key=lambda r: r["rank"])
        if rank in req["waiting"]:
            req["waiting"].remove(rank)
