"""The run's tunables: what the ranks declared (mpwatch.tunable's first call), each one's
value in force, and its recent changes with each rank's answer; and the requests of actions
(contract.actions: checkpoints, profiles, memory snapshots) with theirs. Plain records, changed by
supervisor.live.room and supervisor.live.actions under the run's lock; `status()` copies
them into contract.live's records for the snapshot.

A change for a later step is pending until it is in force: every rank asked took it, at least
one did (a rank whose process ended before is no longer waited for; a change nobody took yet
stays pending, for the ranks started again). Only then is its value the tunable's `value`, the
one a rank started again starts with (`values`); a change at each rank's next call (no step)
is in force at once, as is one no rank could be asked (the next ones start with it).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from mpwatch.contract import (
    ACTIONS,
    KEPT,
    ActionRequest,
    FileResult,
    LiveView,
    RankAnswer,
    TunableChange,
    TunableStatus,
    TunableType,
    TunableValue,
    record,
)

CHANGES_KEPT = 8  # per tunable
TUNABLES_MAX = 256  # declared names a run keeps (a rank sends as many); past it a refusal says so


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

    def results_list(self) -> list[FileResult]:
        return [self.results[k].copy() for k in sorted(self.results)]


@dataclass(eq=False)
class Change(Request):
    value: TunableValue = 0
    old: TunableValue = 0  # the value in force when it was asked
    pending: bool = False  # not in force yet (see the module's doc)
    forced: int = 0  # the registry's epoch when it came into force (Registry.epoch)

    def due(self) -> bool:
        """A pending change every rank asked has taken (and one at least)."""
        return self.pending and bool(self.answers) and not self.waiting()


@dataclass(eq=False)
class Tunable:
    name: str
    type: TunableType
    default: TunableValue
    value: TunableValue  # the value in force
    forced: int = 0  # the registry's epoch when a change last came into force (0: never)
    ranks: set[int] = field(default_factory=set)
    changes: list[Change] = field(default_factory=list)  # oldest first

    def add(self, c: Change) -> None:
        """A new change; the oldest one in force goes past CHANGES_KEPT (a pending one stays
        while it can: the ranks still take it)."""
        self.changes.append(c)
        while len(self.changes) > CHANGES_KEPT:
            done = next((x for x in self.changes if not x.pending), self.changes[0])
            self.changes.remove(done)

    def status(self) -> TunableStatus:
        return TunableStatus(
            name=self.name, type=self.type, default=self.default, value=self.value, ranks=sorted(self.ranks),
            changes=[TunableChange(id=c.id, ts=c.ts, value=c.value, old=c.old, step=c.step, by=c.by,
                                   answers=c.answers_list(), waiting=c.waiting(), pending=c.pending)
                     for c in self.changes])


class Registry:
    """Every tunable and checkpoint request of the run (under the run's lock)."""

    def __init__(self) -> None:
        self.tunables: dict[str, Tunable] = {}
        self.asked: dict[str, deque[Asked]] = {name: deque(maxlen=KEPT) for name in ACTIONS}
        self.last_id = 0
        self.epoch = 0  # counts the changes that came into force: what a starting rank's values cover

    def next_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def declare(self, rank: int, name: str, kind: TunableType, default: TunableValue) -> Tunable | None:
        """A rank's declaration; the tunable when the name is new to the run."""
        t = self.tunables.get(name)
        if t is None:
            if len(self.tunables) >= TUNABLES_MAX:
                return None
            t = self.tunables[name] = Tunable(name, kind, default, default, ranks={rank})
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

    def set(self, t: Tunable, c: Change) -> None:
        """A new change of `t`: in force at once when it has no step or no rank was asked."""
        c.pending = c.step is not None and bool(c.asked)
        t.add(c)
        if not c.pending:
            self.force(t, c)

    def force(self, t: Tunable, c: Change) -> None:
        c.pending = False
        self.epoch += 1
        c.forced = t.forced = self.epoch
        t.value = c.value

    def settle(self) -> None:
        """The pending changes every rank asked has taken come into force (after answers, exits)."""
        for t in self.tunables.values():
            for c in t.changes:
                if c.due():
                    self.force(t, c)

    def forget(self, rank: int) -> None:
        """A new process of `rank` starts: the pending changes its last one took, it takes again."""
        for t in self.tunables.values():
            for c in t.changes:
                if c.pending:
                    c.answers.pop(rank, None)
                    c.asked.discard(rank)

    def values(self) -> dict[str, TunableValue]:
        """The values a worker starts with: every tunable whose value in force is a change's."""
        return {t.name: t.value for t in self.tunables.values() if t.forced}

    def owed(self, t: Tunable, rank: int, covered: int) -> list[Change]:
        """What a rank's new channel is sent of `t`: the pending changes it has not taken, and
        the value in force when it came into force after `covered` (the epoch its environment
        had) and the rank has not taken it."""
        out = [c for c in t.changes if c.pending and rank not in c.answers]
        latest = max((c for c in t.changes if c.forced), key=lambda c: c.forced, default=None)
        if latest is not None and latest.forced > covered and rank not in latest.answers:
            out.insert(0, latest)
        return out

    def status(self) -> LiveView:
        tunables = [self.tunables[n].status() for n in sorted(self.tunables)]
        requests = {name: [record(ACTIONS[name], r.record(), r.args, r.results_list()) for r in reqs]
                    for name, reqs in self.asked.items()}
        return LiveView(tunables, requests)
