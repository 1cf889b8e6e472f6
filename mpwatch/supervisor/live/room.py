"""The live room in the supervisor: "checkpoint now", profiles and tunable changes, sent down
each rank's channel (protocol 2), and what the ranks answer.

- The control commands (supervisor.commands) call `ask` (an action: contract.actions,
  handled by supervisor.live.actions' desk) and `set` on the main thread: each picks the
  step (supervisor.live.reach), records the request, says so in an event, and sends a frame
  to every rank asked (supervisor.ipc.channels' Peer.send never blocks).
- The channel hub's threads call `on_hello` (a rank's channel opened: what it has not had yet
  is sent again) and `on_entries` (its declarations, answers and results: events).
- The main loop calls `on_exit` when a rank's process ended (what it never answered is
  missed) and `push` each tick; `spawn_env` as it starts a rank (the values it starts with).
State changes under the run's lock; events are written once it is released.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from mpwatch.contract import (
    Action,
    Declared,
    Done,
    Event,
    LiveEntry,
    LiveView,
    RankAnswer,
    Reply,
    Result,
    parse_value,
    protocol,
    shown,
)
from mpwatch.rundir.writer import RunStore
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.live import reach
from mpwatch.supervisor.live.actions import ActionDesk, Flames
from mpwatch.supervisor.live.records import TUNABLES_MAX, Asked, Change, Registry
from mpwatch.supervisor.workers.worker import Downlink, Worker
from mpwatch.text import fmt

Pending = list[tuple[Event, int | None, dict[str, Any]]]  # events to write once the lock is released
NAMES_SHOWN = 20  # declared names a refusal lists (a run may have 256)


class LiveRoom:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog,
                 flush_s: Callable[[], float], store: RunStore | None = None, flames: Flames | None = None):
        self.workers = workers
        self.lock = lock
        self.log = log
        self.flush_s = flush_s  # the workers' sender interval now: how soon a request reaches them
        self.book = Registry()
        self.desk = ActionDesk(workers, lock, log, self.book, flush_s, store, flames)

    # ------------------------------------------------------------ main thread ----
    def spawn_env(self, env: dict[str, str], rank: int) -> int:
        """The tunables' values in force into a starting rank's environment (a change still
        pending reaches it on its channel, at its step, as the other ranks take it); the epoch
        they cover (records.Registry.epoch)."""
        with self.lock:
            self.book.forget(rank)
            values, last = self.book.values(), self.book.epoch
        if values:
            env[protocol.ENV_TUNABLES] = json.dumps(values)
        else:
            env.pop(protocol.ENV_TUNABLES, None)  # never the caller's own
        return last

    def ask(self, action: Action, ws: list[Worker], every: bool, at: int | None, by: str, plan_only: bool,
            args: dict[str, Any]) -> Reply:
        """Ask `ws` (every rank with `every`) for an action (a checkpoint, a profile), at one
        step on all of them (supervisor.live.actions)."""
        return self.desk.ask(action, ws, every, at, by, plan_only, args)

    def set(self, name: str, text: str, at: int | None, by: str, plan_only: bool) -> Reply:
        """Change a tunable on every rank, at one step."""
        with self.lock:
            t = self.book.tunables.get(name)
            if t is None:
                raise CommandError(f"no worker declared a tunable {name!r}; declared: {self._declared()}")
            try:
                value = parse_value(text, t.type)
            except ValueError as exc:
                raise CommandError(f"{name} is {'an' if t.type == 'int' else 'a'} {t.type}: {exc}") from None
            reached, _ = reach.reachable([self.workers[r] for r in sorted(self.workers)])
            picked = reach.step_for(reached, True, at, self.flush_s())
            step = picked.step
            if plan_only:
                return {"ok": True, "step": step}
            change = Change(self.book.next_id(), by, step, {w.rank for w in reached}, value=value,
                            old=t.value)
            self.book.set(t, change)
        frame = protocol.encode({"t": protocol.SET, "id": change.id, "name": name, "value": value,
                                 "step": step})
        reach.send(reached, lambda w: frame, change, self.lock)
        self.log.event(Event.TUNABLE_SET, None, id=change.id, tunable=name, value=value, old=change.old,
                       step=step, by=by, ranks=sorted(change.asked))
        if step is not None:  # not in force before the ranks reach it
            text = f"{name} = {shown(value)} from step {step} on {fmt.ranks(change.asked)} " \
                f"(now {shown(change.old)})"
        else:
            text = f"{name} = {shown(value)} (was {shown(change.old)}) on {fmt.ranks(change.asked)} " \
                "at each one's next call"
        text += "".join(f"; {n}" for n in reach.apart_notes(picked))
        if not reached:
            text = (f"{name} = {shown(value)} (was {shown(change.old)}): no rank runs now; "
                    "the next ones start with it")
        return {"ok": True, "id": change.id, "step": step, "message": text}

    def on_exit(self, w: Worker) -> None:
        """Its process ended: what it did not answer is missed (its next process starts with
        the tunables' values)."""
        events: Pending = []
        with self.lock:
            w.attempt.peer = None
            self.desk.on_exit(w, events)
            for t in self.book.tunables.values():
                for c in t.changes:
                    if w.rank not in c.answers:
                        c.asked.discard(w.rank)
            self.book.settle()  # what the others all took comes into force
        self._write(events)

    def push(self) -> None:
        """Write what the peers' sockets did not take at once (each tick)."""
        for w in list(self.workers.values()):
            peer = w.attempt.peer
            if peer is not None:
                peer.push()

    # ----------------------------------------------------------- hub threads ----
    def on_hello(self, w: Worker, peer: Downlink, version: int) -> None:
        """A rank's own process opened its channel: requests it has not answered go again
        (a reconnect: the worker applies each id once), and of each tunable the changes still
        pending (at their step) and the value that came into force since it started (at once)."""
        if version < protocol.DOWN_VERSION:
            return
        frames: list[bytes] = []
        with self.lock:
            a = w.attempt
            a.peer = peer
            frames += self.desk.frames(w)
            for t in self.book.tunables.values():
                for c in self.book.owed(t, w.rank, a.live_from):
                    c.asked.add(w.rank)
                    frames.append(protocol.encode({"t": protocol.SET, "id": c.id, "name": t.name,
                                                   "value": c.value, "step": c.step if c.pending else None}))
        for f in frames:
            peer.send(f)

    def on_entries(self, w: Worker, entries: list[LiveEntry]) -> None:
        """What a rank's own process said in a batch: it polls, it declared, it answered."""
        events: Pending = []
        with self.lock:
            for e in entries:
                if isinstance(e, (Done, Result)):
                    self._answered(w.rank, e, events)
                elif isinstance(e, Declared):
                    t = self.book.declare(w.rank, e.name, e.type, e.default)
                    if t is not None:
                        events.append((Event.TUNABLE_DECLARED, w.rank, {"tunable": t.name, "type": t.type,
                                                                         "value": t.default}))
                else:
                    w.attempt.polls = True
        self._write(events)

    def _answered(self, rank: int, e: Done | Result, events: Pending) -> None:
        found = self.book.find(e.id)
        if found is None:
            return
        req, t = found
        if isinstance(req, Asked):
            if isinstance(e, Done):
                self.desk.answered(rank, req, e, events)
            else:
                self.desk.outcome(rank, req, e, events)
            return
        if rank in req.answers or isinstance(e, Result):
            return
        req.answers[rank] = RankAnswer(rank=rank, step=e.step, late=e.late)
        req.asked.add(rank)
        fields: dict[str, Any] = {"id": req.id, "step": e.step, "at": req.step, "late": e.late}
        if t is not None:
            assert isinstance(req, Change)  # a tunable's request is one of its changes
            events.append((Event.TUNABLE_APPLIED, rank, {**fields, "tunable": t.name, "value": req.value}))
            if req.due():
                self.book.force(t, req)

    # --------------------------------------------------------------- readers ----
    def status(self) -> LiveView:
        """For the snapshot (under the run's lock)."""
        return self.book.status()

    def _write(self, events: Pending) -> None:
        for name, rank, fields in events:
            self.log.event(name, rank, **fields)

    def _declared(self) -> str:
        """The declared names for a refusal: the first NAMES_SHOWN, and the cap when it is reached."""
        names = sorted(self.book.tunables)
        if not names:
            return "none yet (mpwatch.tunable(NAME, DEFAULT) declares one)"
        listed = ", ".join(names[:NAMES_SHOWN]) + (f" and {len(names) - NAMES_SHOWN} more"
                                                   if len(names) > NAMES_SHOWN else "")
        if len(names) >= TUNABLES_MAX:
            listed += f" (a run keeps {TUNABLES_MAX} tunables: names declared past them are not kept)"
        return listed
