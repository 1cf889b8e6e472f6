"""Control's room in the supervisor: "checkpoint now" and tunable changes, sent down each
rank's channel (protocol 2), and what the ranks answer.

- The control commands (supervisor.ipc.commands) call `checkpoint` and `set` on the main
  thread: each picks the step (supervisor.control.plan), records the request, says so in an event,
  and sends a frame to every rank asked (supervisor.ipc.channels' Peer.send never blocks).
- The channel hub's threads call `on_hello` (a rank's channel opened: what it has not had yet
  is sent again) and `on_entries` (its declarations and answers: events).
- The main loop calls `on_exit` when a rank's process ended (what it never answered is
  missed) and `push` each tick; `spawn_env` as it starts a rank (the values it starts with).
State changes under the run's lock; events are written once it is released.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from mpwatch.contract import protocol
from mpwatch.contract.control import ControlEntry, Declared, Done, RankAnswer, parse_value, shown
from mpwatch.contract.status import CheckpointRequest, Event, TunableStatus
from mpwatch.supervisor.control import plan
from mpwatch.supervisor.control.records import Change, Registry, Request
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.workers.worker import Downlink, Worker
from mpwatch.text import fmt

Reply = dict[str, Any]
Pending = list[tuple[Event, int | None, dict[str, Any]]]  # events to write once the lock is released
CONNECTS = "it connects at its first report(), tunable() or should_checkpoint()"


class ControlRoom:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog,
                 flush_s: Callable[[], float]):
        self.workers = workers
        self.lock = lock
        self.log = log
        self.flush_s = flush_s  # the workers' sender interval now: how soon a request reaches them
        self.book = Registry()

    # ------------------------------------------------------------ main thread ----
    def spawn_env(self, env: dict[str, str]) -> int:
        """The tunables' values into a starting rank's environment; the last request id they cover."""
        with self.lock:
            values, last = self.book.values(), self.book.last_id
        if values:
            env[protocol.ENV_TUNABLES] = json.dumps(values)
        else:
            env.pop(protocol.ENV_TUNABLES, None)  # never the caller's own
        return last

    def checkpoint(self, ws: list[Worker], every: bool, at: int | None, by: str, plan_only: bool) -> Reply:
        """Ask `ws` (every rank with `every`) to checkpoint, at one step on all of them."""
        with self.lock:
            reach, away = self._reachable(ws)
            if not reach:
                raise CommandError(f"cannot ask {fmt.ranks(away)} to checkpoint: " + self._away(away))
            step = self._step(reach, every, at)
            if plan_only:
                return {"ok": True, "step": step}
            req = Request(self.book.next_id(), by, step, {w.rank for w in reach})
            self.book.checkpoints.append(req)
            quiet = [w.rank for w in reach if not w.attempt.polls]
        frame = protocol.encode({"t": protocol.CHECKPOINT, "id": req.id, "step": step})
        lost = self._send(reach, frame, req)
        self.log.event(Event.CHECKPOINT_REQUESTED, None, id=req.id, ranks=sorted(req.asked), step=step, by=by)
        notes = [f"{fmt.ranks(quiet)} never called mpwatch.should_checkpoint() yet"] if quiet else []
        notes += [f"{fmt.ranks(away)} cannot be asked: {self._away(away)}"] if away else []
        notes += [f"{fmt.ranks(lost)}: its channel is full (it does not read)"] if lost else []
        return {"ok": True, "id": req.id, "step": step,
                "message": f"checkpoint asked of {fmt.ranks(req.asked)} "
                + (f"at step {step}" if step is not None else "at its next call")
                + "".join(f"; {n}" for n in notes)}

    def set(self, name: str, text: str, at: int | None, by: str, plan_only: bool) -> Reply:
        """Change a tunable on every rank, at one step."""
        with self.lock:
            t = self.book.tunables.get(name)
            if t is None:
                names = ", ".join(sorted(self.book.tunables)) or "none yet (mpwatch.tunable(NAME, DEFAULT) " \
                    "declares one)"
                raise CommandError(f"no worker declared a tunable {name!r}; declared: {names}")
            try:
                value = parse_value(text, t.type)
            except ValueError as exc:
                raise CommandError(f"{name} is {'an' if t.type == 'int' else 'a'} {t.type}: {exc}") from None
            reach, _ = self._reachable([self.workers[r] for r in sorted(self.workers)])
            step = self._step(reach, True, at)
            if plan_only:
                return {"ok": True, "step": step}
            change = Change(self.book.next_id(), by, step, {w.rank for w in reach}, value=value, old=t.value)
            t.changes.append(change)
            t.value = value
        frame = protocol.encode({"t": protocol.SET, "id": change.id, "name": name, "value": value,
                                 "step": step})
        self._send(reach, frame, change)
        self.log.event(Event.TUNABLE_SET, None, id=change.id, tunable=name, value=value, old=change.old,
                       step=step, by=by, ranks=sorted(change.asked))
        text = f"{name} = {shown(value)} (was {shown(change.old)}) on {fmt.ranks(change.asked)} " \
            + (f"from step {step}" if step is not None else "at each one's next call")
        if not reach:
            text = (f"{name} = {shown(value)} (was {shown(change.old)}): no rank runs now; "
                    "the next ones start with it")
        return {"ok": True, "id": change.id, "step": step, "message": text}

    def on_exit(self, w: Worker) -> None:
        """Its process ended: what it did not answer is missed (its next process starts with
        the tunables' values)."""
        events: Pending = []
        with self.lock:
            w.attempt.peer = None
            for req in self.book.checkpoints:
                if w.rank in req.asked and w.rank not in req.answers and w.rank not in req.missed:
                    req.missed.add(w.rank)
                    events.append((Event.CHECKPOINT_MISSED, w.rank, {"id": req.id, "at": req.step,
                                                                      "why": "its process ended first"}))
            for t in self.book.tunables.values():
                for c in t.changes:
                    if w.rank not in c.answers:
                        c.asked.discard(w.rank)
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
        (a reconnect: the worker applies each id once), and tunable changes made since it started."""
        if version < protocol.DOWN_VERSION:
            return
        frames: list[bytes] = []
        with self.lock:
            a = w.attempt
            a.peer = peer
            for req in self.book.checkpoints:
                if w.rank in req.asked and w.rank not in req.answers and w.rank not in req.missed:
                    frames.append(protocol.encode({"t": protocol.CHECKPOINT, "id": req.id, "step": req.step}))
            for t in self.book.tunables.values():
                c = t.changes[-1] if t.changes else None
                if c is not None and c.id > a.live_from and w.rank not in c.answers:
                    c.asked.add(w.rank)
                    frames.append(protocol.encode({"t": protocol.SET, "id": c.id, "name": t.name,
                                                   "value": c.value, "step": c.step}))
        for f in frames:
            peer.send(f)

    def on_entries(self, w: Worker, entries: list[ControlEntry]) -> None:
        """What a rank's own process said in a batch: it polls, it declared, it answered."""
        events: Pending = []
        with self.lock:
            for e in entries:
                if isinstance(e, Done):
                    self._answered(w.rank, e, events)
                elif isinstance(e, Declared):
                    t = self.book.declare(w.rank, e.name, e.type, e.default)
                    if t is not None:
                        events.append((Event.TUNABLE_DECLARED, w.rank, {"tunable": t.name, "type": t.type,
                                                                         "value": t.default}))
                else:
                    w.attempt.polls = True
        self._write(events)

    def _answered(self, rank: int, e: Done, events: Pending) -> None:
        found = self.book.find(e.id)
        if found is None:
            return
        req, t = found
        if rank in req.answers:
            return
        req.answers[rank] = RankAnswer(rank=rank, step=e.step, late=e.late)
        req.asked.add(rank)
        fields: dict[str, Any] = {"id": req.id, "step": e.step, "at": req.step, "late": e.late}
        if t is None:
            events.append((Event.CHECKPOINT_TAKEN, rank, fields))
        else:
            assert isinstance(req, Change)  # a tunable's request is one of its changes
            events.append((Event.TUNABLE_APPLIED, rank, {**fields, "tunable": t.name, "value": req.value}))

    # --------------------------------------------------------------- readers ----
    def status(self) -> tuple[list[TunableStatus], list[CheckpointRequest]]:
        """For the snapshot (under the run's lock)."""
        return self.book.status()

    # --------------------------------------------------------------- helpers ----
    def _reachable(self, ws: list[Worker]) -> tuple[list[Worker], list[int]]:
        reach = [w for w in ws if w.alive and w.attempt.peer is not None]
        got = {w.rank for w in reach}
        return reach, [w.rank for w in ws if w.rank not in got]

    def _away(self, ranks: list[int]) -> str:
        if all(not self.workers[r].alive for r in ranks):
            return "not running"
        return f"not connected ({CONNECTS}; a worker of an older mpwatch never is)"

    def _step(self, reach: list[Worker], collective: bool, at: int | None) -> int | None:
        now = time.monotonic()
        paces = {w.rank: plan.Pace(w.reports.step, w.attempt.steps_per_second(),
                                   None if w.attempt.last_report is None else now - w.attempt.last_report)
                 for w in reach}
        if at is not None:
            passed = plan.passed(paces, at)
            if passed:
                r, s = min(passed.items())
                raise CommandError(f"step {at} is past: rank {r} is at step {s}")
            return at
        return plan.pick_step(list(paces.values()), self.flush_s()) if collective else None

    def _send(self, reach: list[Worker], frame: bytes, req: Request) -> list[int]:
        """The frame to each rank's channel; the ranks it could not be sent to (not asked then)."""
        lost = []
        for w in reach:
            peer = w.attempt.peer
            if peer is None or not peer.send(frame):
                lost.append(w.rank)
        if lost:
            with self.lock:
                req.asked.difference_update(lost)
        return lost

    def _write(self, events: Pending) -> None:
        for name, rank, fields in events:
            self.log.event(name, rank, **fields)

