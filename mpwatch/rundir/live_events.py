"""The tunables and the actions' requests (checkpoints, profiles, memory snapshots) of a recorded run, folded
from its events (supervisor.live writes them: tunable_declared, tunable_set, tunable_applied,
and each action's requested, started, written, failed and missed: contract.actions' table) into
the records the live status has (contract.live): the replay shows a moment's
(sources.replay.fold), `summary` the run's (rundir.postmortem). Pure; fed the events in the
order they were written. A change for a later step is in force once every rank it was asked
of took it (the live status also stops waiting for a rank whose process ended: the events do
not say when one was asked again).

Linear in the events, however many ranks they name (a crafted `profile_requested` may list
60,000): each record's ranks are kept as sets beside it (`_Ranks`) while the events are folded,
and written into its lists, sorted, when the status is asked for. A request names at most
RANKS_MAX ranks, each below RANK_LIMIT.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from mpwatch.contract import (
    ACTIONS,
    KEPT,
    TUNABLE_KINDS,
    Action,
    ActionRequest,
    Event,
    EventFields,
    FileResult,
    LiveView,
    RankAnswer,
    TunableChange,
    TunableStatus,
    TunableType,
    as_int,
    as_str,
    read_result,
    record,
    value_of,
)

CHANGES_KEPT = 8  # as supervisor.live.records keeps
_BY_EVENT: dict[str, Action] = {e: a for a in ACTIONS.values() for e in a.events}
LIVE_EVENTS = frozenset({Event.TUNABLE_DECLARED, Event.TUNABLE_SET, Event.TUNABLE_APPLIED, *_BY_EVENT})


RANKS_MAX = 1 << 20  # ranks a request or a change may name (settings' MPWATCH_MAX_WORKERS at most)
RANK_LIMIT = 1 << 24  # a rank past this is no rank of any run


@dataclass
class _Ranks:
    """A record's ranks as sets, while events are folded; `flush` writes them into its lists."""

    answered: dict[int, RankAnswer] = field(default_factory=dict)
    waiting: set[int] = field(default_factory=set)
    missed: set[int] = field(default_factory=set)
    results: dict[int, FileResult] = field(default_factory=dict)

    def flush(self, rec: dict[str, Any]) -> None:
        rec["answers"] = [self.answered[r] for r in sorted(self.answered)]
        if "waiting" in rec:
            rec["waiting"] = sorted(self.waiting)
        if "missed" in rec:
            rec["missed"] = sorted(self.missed)
        if "results" in rec:
            rec["results"] = [self.results[r] for r in sorted(self.results)]


@dataclass
class LiveFold:
    tunables: dict[str, TunableStatus] = field(default_factory=dict)
    # each action's requests (contract.actions.record's), by its name, then by id, oldest first
    requests: dict[str, dict[int, ActionRequest]] = field(default_factory=lambda: {a: {} for a in ACTIONS})
    # each record's ranks as sets (by the record's identity: a request, a tunable's change)
    ranks: dict[int, tuple[dict[str, Any], _Ranks]] = field(default_factory=dict)

    def of(self, rec: Any) -> _Ranks:
        got = self.ranks.get(id(rec))
        if got is None:
            got = self.ranks[id(rec)] = (rec, _Ranks(waiting=set(rec.get("waiting", ())),
                                                     missed=set(rec.get("missed", ()))))
        return got[1]

    def status(self) -> LiveView:
        for rec, sets in self.ranks.values():
            sets.flush(rec)
        return LiveView([self.tunables[n] for n in sorted(self.tunables)],
                        {a: list(reqs.values())[-KEPT:] for a, reqs in self.requests.items()})


def _ranks(raw: object) -> list[int]:
    """The ranks a request's event names: ints, each once, sorted; RANKS_MAX of them at most."""
    if not isinstance(raw, list):
        return []
    return sorted({x for x in raw[:RANKS_MAX] if type(x) is int and 0 <= x < RANK_LIMIT})


def _answer(e: EventFields, sets: _Ranks, waiting: bool = True) -> None:
    r = e["rank"]
    if r is None or r in sets.answered:
        return
    sets.answered[r] = RankAnswer(rank=r, step=as_int(e.get("step")), late=e.get("late") is True)
    if waiting:
        sets.waiting.discard(r)


def _tunable(live: LiveFold, e: EventFields, raw: dict[str, Any]) -> None:
    name, kind = as_str(raw.get("tunable")), as_str(raw.get("type"))
    t = live.tunables.get(name or "")
    if e["event"] == Event.TUNABLE_DECLARED and name and t is None and kind in TUNABLE_KINDS:
        default = value_of(kind, raw.get("value"))
        if default is not None:
            live.tunables[name] = TunableStatus(name=name, type=cast(TunableType, kind), default=default,
                                                value=default, ranks=[] if e["rank"] is None else [e["rank"]],
                                                changes=[])
    elif e["event"] == Event.TUNABLE_DECLARED and t is not None and e["rank"] is not None:
        if e["rank"] not in t["ranks"]:  # (a tunable's ranks: one event each, a few at most)
            t["ranks"] = sorted([*t["ranks"], e["rank"]])
    elif e["event"] == Event.TUNABLE_SET and t is not None:
        _set(live, t, e, raw)
    elif e["event"] == Event.TUNABLE_APPLIED and t is not None:
        c = next((c for c in t["changes"] if c["id"] == as_int(e.get("id"))), None)
        if c is not None:
            sets = live.of(c)
            _answer(e, sets)
            if c["pending"] and sets.answered and not sets.waiting:  # every rank asked took it: in force
                c["pending"] = False
                t["value"] = c["value"]


def _set(live: LiveFold, t: TunableStatus, e: EventFields, raw: dict[str, Any]) -> None:
    """A tunable_set event: a change, in force at once or once every rank asked took it."""
    value, old = value_of(t["type"], raw.get("value")), value_of(t["type"], raw.get("old"))
    rid = as_int(e.get("id"))
    if value is None or rid is None:
        return
    step, asked = as_int(e.get("step")), _ranks(raw.get("ranks"))
    pending = step is not None and bool(asked)  # as supervisor.live.records decides
    change = TunableChange(id=rid, ts=e["ts"], value=value, old=t["value"] if old is None else old, step=step,
                           by=as_str(raw.get("by")) or "?", answers=[], waiting=asked, pending=pending)
    for gone in t["changes"][:-CHANGES_KEPT + 1]:
        live.ranks.pop(id(gone), None)
    t["changes"] = (t["changes"] + [change])[-CHANGES_KEPT:]
    live.of(change)
    if not pending:
        t["value"] = value
    t["ranks"] = sorted(set(t["ranks"]) | set(asked))  # the events name the first only


def apply(live: LiveFold, e: EventFields) -> None:
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
        old = reqs.get(rid)
        if old is not None:
            live.ranks.pop(id(old), None)
        reqs[rid] = record(action, asked, raw, [])  # its arguments are the event's fields
        live.of(reqs[rid])
        return
    req: Any = reqs.get(rid) if rid is not None else None
    rank = e["rank"]
    if req is None or rank is None:
        return
    sets = live.of(req)
    if name == action.started:
        _answer(e, sets, waiting=not action.has_outcome)
    elif name == action.missed and rank in sets.waiting:
        sets.waiting.discard(rank)
        sets.missed.add(rank)
    elif name in (action.written, action.failed) and "results" in req:
        fields = {**raw, "state": "written" if name == action.written else "failed"}
        tool, path = as_str(raw.get("tool")) or "?", as_str(raw.get("path"))
        sets.results[rank] = read_result(rank, fields, tool, path)
        sets.waiting.discard(rank)
