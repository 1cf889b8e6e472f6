"""The tunables and checkpoint requests of a recorded run, folded from its events
(supervisor.control.room writes them: tunable_declared, tunable_set, tunable_applied,
checkpoint_requested, checkpoint_taken, checkpoint_missed) into the records the live status has
(contract.control): the replay shows a moment's (sources.replay.fold), `summary` the run's
(rundir.postmortem). Pure; fed the events in the order they were written.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from mpwatch.contract.coerce import as_int, as_str
from mpwatch.contract.control import TUNABLE_KINDS, CheckpointRequest, RankAnswer, TunableType, value_of
from mpwatch.contract.status import Event, EventFields, TunableChange, TunableStatus

CHANGES_KEPT = 8  # as supervisor.control.records keeps
CHECKPOINTS_KEPT = 8
CONTROL_EVENTS = frozenset({Event.TUNABLE_DECLARED, Event.TUNABLE_SET, Event.TUNABLE_APPLIED,
                         Event.CHECKPOINT_REQUESTED, Event.CHECKPOINT_TAKEN, Event.CHECKPOINT_MISSED})


@dataclass
class ControlFold:
    tunables: dict[str, TunableStatus] = field(default_factory=dict)
    checkpoints: dict[int, CheckpointRequest] = field(default_factory=dict)  # by id, oldest first

    def status(self) -> tuple[list[TunableStatus], list[CheckpointRequest]]:
        return ([self.tunables[n] for n in sorted(self.tunables)],
                list(self.checkpoints.values())[-CHECKPOINTS_KEPT:])


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
        t["changes"] = (t["changes"] + [TunableChange(
            id=rid, ts=e["ts"], value=value, old=t["value"] if old is None else old,
            step=as_int(e.get("step")), by=as_str(raw.get("by")) or "?", answers=[],
            waiting=_ranks(raw.get("ranks")))])[-CHANGES_KEPT:]
        t["value"] = value
        t["ranks"] = sorted(set(t["ranks"]) | set(_ranks(raw.get("ranks"))))  # the events name the first only
    elif e["event"] == Event.TUNABLE_APPLIED and t is not None:
        c = next((c for c in t["changes"] if c["id"] == as_int(e.get("id"))), None)
        if c is not None:
            _answer(e, c["answers"], c["waiting"])


def apply(live: ControlFold, e: EventFields) -> None:
    """One live event into the fold."""
    raw = cast(dict[str, Any], e)
    name, rid = e["event"], as_int(e.get("id"))
    if name == Event.CHECKPOINT_REQUESTED and rid is not None:
        ranks = _ranks(raw.get("ranks"))
        live.checkpoints[rid] = CheckpointRequest(id=rid, ts=e["ts"], by=as_str(raw.get("by")) or "?",
                                                  step=as_int(e.get("step")), ranks=ranks, answers=[],
                                                  waiting=list(ranks), missed=[])
    elif name in (Event.CHECKPOINT_TAKEN, Event.CHECKPOINT_MISSED) and rid in live.checkpoints:
        req = live.checkpoints[rid]
        if name == Event.CHECKPOINT_TAKEN:
            _answer(e, req["answers"], req["waiting"])
        elif e["rank"] is not None and e["rank"] in req["waiting"]:
            req["waiting"].remove(e["rank"])
            req["missed"] = sorted(req["missed"] + [e["rank"]])
    else:
        _tunable(live, e, raw)
