"""The run's tunables: what the ranks declared (mpwatch.tunable's first call), each one's
value now, and its recent changes with each rank's answer; and the requests of actions
(contract.actions: checkpoints, profiles) with theirs. Plain records, changed by
supervisor.control.room and supervisor.control.actions under the run's lock; `status()` copies
them into contract.control's records for the snapshot.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from mpwatch.contract.actions import ACTIONS, KEPT, ActionRequest, FileResult
from mpwatch.contract.control import (
    CheckpointRequest,
    ControlView,
    ProfileRequest,
    RankAnswer,
    TunableChange,
    TunableStatus,
    TunableType,
    TunableValue,
)

CHANGES_KEPT = 8  # per tunable
TUNABLES_MAX = 256  # declared names a run keeps; past it new names are ignored


@dataclass(eq=False)
class Request:
    """A checkpoint request or a tunable's change: who was asked and what each answered."""

    id: int
    by: str
    step: int | None
    asked: set[int]  # ranks whose channel got it
    ts: float = field(default_factory=lambda: round(time.time(), 6))  # as events.jsonl keeps it
    answers: dict[int, RankAnswer] = field(default_factory=dict)
    missed: set[int] = field(default_factory=set)  # ended before answering

    def waiting(self) -> list[int]:
        """Ranks asked that have not answered (nor ended first)."""
        return sorted(self.asked - set(self.answers) - self.missed)

    def answers_list(self) -> list[RankAnswer]:
        return [self.answers[r].copy() for r in sorted(self.answers)]


@dataclass(eq=False)
class Asked(Request):
    """A request of an action (contract.actions), its arguments, and each rank's outcome."""

    action: str = "checkpoint"
    args: dict[str, Any] = field(default_factory=dict)
    paths: dict[int, str] = field(default_factory=dict)  # rank -> its file, relative to the run directory
    results: dict[int, FileResult] = field(default_factory=dict)
    no_outcome: bool = True  # answered is done (a checkpoint); else a rank waits for its outcome

    def waiting(self) -> list[int]:
        done = set(self.answers) if self.no_outcome else set(self.results)
        return sorted(self.asked - done - self.missed)

    def record(self) -> ActionRequest:
        return ActionRequest(id=self.id, ts=self.ts, by=self.by, step=self.step, ranks=sorted(self.asked),
                             answers=self.answers_list(), waiting=self.waiting(), missed=sorted(self.missed))


@dataclass(eq=False)
class Change(Request):
    value: TunableValue = 0
    old: TunableValue = 0


@dataclass(eq=False)
class Tunable:
    name: str
    type: TunableType
    default: TunableValue
    value: TunableValue
    ranks: set[int] = field(default_factory=set)
    changes: deque[Change] = field(default_factory=lambda: deque(maxlen=CHANGES_KEPT))

    def status(self) -> TunableStatus:
        return TunableStatus(
            name=self.name, type=self.type, default=self.default, value=self.value, ranks=sorted(self.ranks),
            changes=[TunableChange(id=c.id, ts=c.ts, value=c.value, old=c.old, step=c.step, by=c.by,
                                   answers=c.answers_list(), waiting=c.waiting())
                     for c in self.changes])


class Registry:
    """Every tunable and checkpoint request of the run (under the run's lock)."""

    def __init__(self) -> None:
        self.tunables: dict[str, Tunable] = {}
        self.asked: dict[str, deque[Asked]] = {name: deque(maxlen=KEPT) for name in ACTIONS}
        self.last_id = 0

    def next_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def declare(self, rank: int, name: str, kind: TunableType, default: TunableValue) -> Tunable | None:
        """A rank's declaration; the tunable when the name is new to the run."""
        t = self.tunables.get(name)
        if t is None:
            if len(self.tunables) >= TUNABLES_MAX:
                return None
            t = self.tunables[name] = Tunable(name, kind, default, default, {rank})
            return t
        if t.type == kind:  # one of another type keeps its own default: its set values are refused there
            t.ranks.add(rank)
        return None

    def find(self, rid: int) -> tuple[Request, Tunable | None] | None:
        """The request of that id (and its tunable, for a change), if still kept."""
        for reqs in self.asked.values():
            for r in reqs:
                if r.id == rid:
                    return r, None
        for t in self.tunables.values():
            for c in t.changes:
                if c.id == rid:
                    return c, t
        return None

    def values(self) -> dict[str, TunableValue]:
        """The values a worker starts with: every tunable changed from its default."""
        return {t.name: t.value for t in self.tunables.values() if t.changes}

    def status(self) -> ControlView:
        tunables = [self.tunables[n].status() for n in sorted(self.tunables)]
        checkpoints = [CheckpointRequest(**r.record()) for r in self.asked["checkpoint"]]
        profiles = [ProfileRequest(**r.record(), steps=r.args.get("steps", 0),
                                   results=[r.results[k].copy() for k in sorted(r.results)])
                    for r in self.asked["profile"]]
        return ControlView(tunables, checkpoints, profiles)
