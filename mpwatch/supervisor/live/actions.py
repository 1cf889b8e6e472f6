"""The requests of actions at one step (contract.actions: "checkpoint now", a profile, a CUDA
memory snapshot), from the ask to each rank's answer and outcome: one desk for every action.

- `ask` (the main thread, from a control command): the ranks reached, the step (one on every
  rank asked of all: supervisor.live.reach), the request recorded, an event, a frame down
  each rank's channel. An action that writes files gets a path per rank in rank-N/<folder>/
  (the writer makes the folder; the rank's process writes the file).
- `frames` (a hub thread, a rank's channel opened): what it has not answered goes again.
- `answered` and `outcome` (a hub thread): a rank's "done" (it took it, or started) and its
  result (written, or why not), each an event; `on_exit` (the main thread): what a rank never
  answered is missed, what it started and never finished failed.
- A profile asked of a rank without torch, or whose process has no channel, is py-spy's
  (supervisor.live.flame), where it is installed and allowed.
All but `ask`'s sending run under the run's lock; events go in `Pending` and are written after.
"""
from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mpwatch.contract import (
    ACTIONS,
    CHECKPOINT,
    MEMORY,
    PROFILE,
    Action,
    Done,
    Event,
    FileResult,
    RankAnswer,
    Reply,
    Result,
    protocol,
    read_result,
)
from mpwatch.rundir import layout
from mpwatch.rundir.writer import RunStore
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.live import reach
from mpwatch.supervisor.live.records import Asked, Registry
from mpwatch.supervisor.workers.worker import Worker
from mpwatch.text import fmt

Pending = list[tuple[Event, int | None, dict[str, Any]]]  # events to write once the lock is released
NOT_WRITTEN = "its process ended before it was written"


class Flames(Protocol):
    """What runs py-spy for a rank (supervisor.live.flame's FlameRecorder)."""

    def refusal(self) -> str | None: ...

    def record(self, w: Worker, req: Asked, done: Callable[[FileResult, Asked], None]) -> None: ...


class ActionDesk:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog, book: Registry,
                 flush_s: Callable[[], float], store: RunStore | None, flames: Flames | None):
        self.workers = workers
        self.lock = lock
        self.log = log
        self.book = book
        self.flush_s = flush_s
        self.store = store  # None: a room without a run directory (nothing that writes files is asked)
        self.flames = flames

    # ------------------------------------------------------------ main thread ----
    def ask(self, action: Action, ws: list[Worker], every: bool, at: int | None, by: str, plan_only: bool,
            args: dict[str, Any]) -> Reply:
        """Ask `ws` (every rank with `every`) for the action, at one step on all of them."""
        with self.lock:
            reach_, away = reach.reachable(ws)
            old = [w.rank for w in reach_ if w.attempt.peer is not None
                   and w.attempt.peer.version < action.version]
            reach_ = [w for w in reach_ if w.rank not in old]
            spy = [self.workers[r] for r in away if action is PROFILE and self.workers[r].alive]
            away = [r for r in away if r not in {w.rank for w in spy}]
            if not reach_ and not spy:
                why = reach.away(self.workers, away) if away else "its mpwatch is older (it cannot)"
                raise CommandError(f"cannot ask {fmt.ranks(away + old)} to {_verb(action)}: {why}")
            picked = reach.step_for(reach_, every, at, self.flush_s())
            step = picked.step
            if plan_only:
                return {"ok": True, "step": step}
            req = Asked(self.book.next_id(), by, step, {w.rank for w in reach_ + spy}, action=action.name,
                        args=args, no_outcome=not action.has_outcome)
            self._paths(action, req)
            self.book.asked[action.name].append(req)
            quiet = [w.rank for w in reach_ if action is CHECKPOINT and not w.attempt.polls]
        lost = reach.send(reach_, lambda w: self._frame(req, w.rank), req, self.lock)
        # at the request's own time: the replay's record of it is the live one
        self.log.event(action.requested, None, ts=req.ts, id=req.id, ranks=sorted(req.asked), step=step,
                       by=by, **args)
        for w in spy:
            self.spy(w, req, f"rank {w.rank} has no channel to mpwatch")
        notes = reach.apart_notes(picked)
        notes += [f"{fmt.ranks(quiet)} never called mpwatch.should_checkpoint() yet"] if quiet else []
        notes += [f"{fmt.ranks(away)} cannot be asked: {reach.away(self.workers, away)}"] if away else []
        notes += [f"{fmt.ranks(old)} cannot be asked: its mpwatch is older"] if old else []
        notes += [f"{fmt.ranks(lost)}: its channel is full (it does not read)"] if lost else []
        notes += [f"{fmt.ranks([w.rank for w in spy])}: py-spy instead (no channel)"] if spy else []
        return {"ok": True, "id": req.id, "step": step,
                "message": _asked(action, req) + "".join(f"; {n}" for n in notes)}

    def _paths(self, action: Action, req: Asked) -> None:
        """Each rank's file, its folder made (under the lock: a few syscalls)."""
        if action.folder is None:
            return
        if self.store is None:
            raise CommandError(f"no run directory to write {action.name}s into")
        name = layout.action_stem(req.ts, req.id) + action.suffix
        for r in sorted(req.asked):
            try:
                folder = self.store.action_dir(r, action.folder)
            except OSError as exc:
                raise CommandError(f"cannot make rank {r}'s folder for it: {exc.strerror or exc}") from None
            req.paths[r] = str((folder / name).relative_to(self.store.dir))

    def _frame(self, req: Asked, rank: int) -> bytes:
        msg: dict[str, Any] = {"t": req.action, "id": req.id, "step": req.step, **req.args}
        if rank in req.paths and self.store is not None:
            msg["path"] = str(self.store.dir / req.paths[rank])
        return protocol.encode(msg)

    # ----------------------------------------------------------- hub threads ----
    def frames(self, w: Worker) -> list[bytes]:
        """Under the lock: the requests a rank's channel, opened again, must get (a reconnect:
        the worker runs each id once)."""
        return [self._frame(req, w.rank) for reqs in self.book.asked.values() for req in reqs
                if w.rank in req.asked and w.rank not in req.answers and w.rank not in req.missed
                and w.rank not in req.results]

    def answered(self, rank: int, req: Asked, e: Done, events: Pending) -> None:
        """Under the lock: a rank took the request, or started it, at step e.step."""
        if rank in req.answers:
            return
        req.answers[rank] = RankAnswer(rank=rank, step=e.step, late=e.late)
        req.asked.add(rank)
        fields: dict[str, Any] = {"id": req.id, "step": e.step, "at": req.step, "late": e.late}
        if _action(req).tool:
            fields["tool"] = _action(req).tool
        events.append((_action(req).started, rank, fields))

    def outcome(self, rank: int, req: Asked, e: Result, events: Pending) -> None:
        """Under the lock: a rank's result; a profile of a rank without torch goes to py-spy."""
        if rank in req.results or rank in req.missed:
            return
        w = self.workers.get(rank)
        if req.action == PROFILE.name and e.fields.get("no_torch") is True and w is not None and w.alive:
            # py-spy's start writes events: not under the lock, not on the hub's thread
            threading.Thread(target=self.spy, args=(w, req, f"rank {rank} has not imported torch"),
                             name="mpwatch-flame", daemon=True).start()
            return
        r = read_result(rank, e.fields, _action(req).tool or "?", req.paths.get(rank))
        self._result(req, self._checked(r), events)

    def _checked(self, r: FileResult) -> FileResult:
        """A rank's word that it wrote its file, checked: a regular file is at the path mpwatch chose
        (read_result keeps no other), and its size is the file's, whatever the rank said."""
        if r["state"] != "written" or self.store is None:
            return r
        path = r["path"]
        try:
            st = os.lstat(self.store.dir / path) if path is not None else None
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            said = r["bytes"]
            return FileResult(rank=r["rank"], state="failed", tool=r["tool"], path=path, bytes=None,
                              why=f"no file at {path} (its rank said it wrote {said} bytes there)",
                              steps=r["steps"], top=r["top"], held_ms=r["held_ms"])
        out = r.copy()
        out["bytes"] = st.st_size
        return out

    def _result(self, req: Asked, r: FileResult, events: Pending) -> None:
        req.results[r["rank"]] = r
        req.asked.add(r["rank"])
        act = _action(req)
        fields: dict[str, Any] = {"id": req.id, "tool": r["tool"], "why": r["why"]}
        if r["state"] == "written" and act.written is not None:
            top = [[t["name"], t["self_cpu_us"], t["self_device_us"], t["calls"]] for t in r["top"]]
            fields.update(path=r["path"], bytes=r["bytes"], steps=r["steps"], top=top, held_ms=r["held_ms"])
            events.append((act.written, r["rank"], fields))
        elif act.failed is not None:
            events.append((act.failed, r["rank"], fields))

    def spy(self, w: Worker, req: Asked, cause: str) -> None:
        """A profile by py-spy for a rank torch.profiler cannot reach (`cause`: why not), or
        the one line that says why there is none. Not under the lock."""
        flames = self.flames
        why = "py-spy is not available here" if flames is None else flames.refusal()
        if why is not None or flames is None:
            self.flamed(FileResult(rank=w.rank, state="failed", tool="py-spy", path=None, bytes=None,
                                   why=f"{cause}, and {why}: no profile", steps=None, top=[], held_ms=None),
                        req)
            return
        started: Pending = []
        with self.lock:
            self.answered(w.rank, req, Done(req.id, w.reports.step, False), started)
        started = [(name, rank, {**fields, "tool": "py-spy"}) for name, rank, fields in started]
        self._write(started)
        flames.record(w, req, self.flamed)

    def flamed(self, r: FileResult, req: Asked) -> None:
        """py-spy's outcome for a rank (its recording thread)."""
        events: Pending = []
        with self.lock:
            if r["rank"] not in req.results:
                self._result(req, r, events)
        self._write(events)

    # ------------------------------------------------------------ main thread ----
    def on_exit(self, w: Worker, events: Pending) -> None:
        """Under the lock: its process ended; what it never answered is missed, what it
        started and never finished failed."""
        for reqs in self.book.asked.values():
            for req in reqs:
                if w.rank not in req.asked or w.rank in req.missed or w.rank in req.results:
                    continue
                if w.rank not in req.answers:
                    req.missed.add(w.rank)
                    events.append((_action(req).missed, w.rank, {"id": req.id, "at": req.step,
                                                                 "why": "its process ended first"}))
                elif not req.no_outcome and w.rank in req.paths:
                    r = FileResult(rank=w.rank, state="failed", tool=_action(req).tool or "?",
                                   path=req.paths[w.rank], bytes=None, why=NOT_WRITTEN, steps=None, top=[],
                                   held_ms=None)
                    self._result(req, r, events)

    def _write(self, events: Pending) -> None:
        for name, rank, fields in events:
            self.log.event(name, rank, **fields)


def _action(req: Asked) -> Action:
    return ACTIONS[req.action]


def _verb(action: Action) -> str:
    return "checkpoint" if action is CHECKPOINT else "take a memory snapshot" if action is MEMORY \
        else f"take a {action.name}"


def _asked(action: Action, req: Asked) -> str:
    """What the request's reply says."""
    who, step = fmt.ranks(req.asked), req.step
    if action is CHECKPOINT:
        return f"checkpoint asked of {who} " + (f"at step {step}" if step is not None else "at its next call")
    if action is MEMORY:
        where = sorted({str(Path(p).parent) for p in req.paths.values()})
        return (f"CUDA memory snapshot asked of {who} " + (f"once step {step} is reported" if step is not None
                                                             else "at its next step")
                + (f"; it goes to {where[0]}/" if len(where) == 1 else "; they go to rank-N/memory/"))
    n = req.args.get("steps", 0)
    when = f"steps {step + 1}-{step + n}" if step is not None else f"its next {n} steps"
    where = sorted({str(Path(p).parent) for p in req.paths.values()})
    return (f"profile of {when} asked of {who} (it starts once step {step} is reported)" if step is not None
            else f"profile of {when} asked of {who}") + (f"; traces go to {where[0]}/" if len(where) == 1 else
                                                         "; traces go to rank-N/profiles/")
