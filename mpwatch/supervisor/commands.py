"""The control commands: what a key press in the TUI or `mpwatch ctl` becomes.

`dispatch` runs on the control server's client threads (supervisor.ipc.ctl_server). Read-only
requests (status, events, history, logs) are answered there under the run's lock; every
command that signals or starts a process is handed to the main thread (`submit`), which
alone touches processes, and its reply is waited for. A request that cannot be done raises
supervisor.errors.CommandError: the client gets its message, the run is unaffected. Any other
exception is a bug: its traceback goes to supervisor.log, the client gets "internal error".
"""
from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mpwatch.contract import ACTIONS, Reply, RunState, State, Status, check_args, culprit, numtext
from mpwatch.rundir import layout, textfiles, writer
from mpwatch.supervisor import boundary
from mpwatch.supervisor.diagnose.dumps import Dumper
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.supervisor.live.room import LiveRoom
from mpwatch.supervisor.options import Options
from mpwatch.supervisor.waker import Waker
from mpwatch.supervisor.workers import groups
from mpwatch.supervisor.workers.worker import TAIL, Worker

RANK_COMMANDS = ("pause", "resume", "kill", "restart", "dump")
REPLY_S = 30.0  # a command the main thread has not answered by then gets an error reply
STOP_ASKED = "asked with ctl stop or the TUI"  # the `why` of a stop a client asked for


class Lifecycle(Protocol):
    """What the commands ask of the run itself (supervisor.core's Run)."""

    @property
    def state(self) -> RunState: ...

    def snapshot(self, tail: int = TAIL) -> Status: ...

    def kill(self, w: Worker, reason: str) -> bool: ...

    def resize(self, n: int) -> str: ...

    def stop(self, why: str) -> int: ...


@dataclass(eq=False)
class _Job:
    fn: Callable[[], Reply]
    name: str  # the command, for supervisor.log
    done: threading.Event = field(default_factory=threading.Event)
    reply: Reply | None = None


@dataclass(eq=False)
class Commands:
    """The commands of one run, over the rooms they ask (built by supervisor.core's Run)."""

    run: Lifecycle
    workers: dict[int, Worker]
    lock: threading.RLock
    opts: Options
    store: writer.RunStore
    log: EventLog
    dumper: Dumper
    gpu: GpuWatch
    live: LiveRoom
    _jobs: queue.Queue[_Job] = field(default_factory=queue.Queue, init=False, repr=False)
    waker: Waker = field(default_factory=Waker, init=False, repr=False)  # the serve loop waits on it

    # ---------------------------------------------------- to the main thread ----
    def submit(self, fn: Callable[[], Reply], name: str) -> Reply:
        """Run fn on the main thread (from a control thread) and wait for its reply."""
        job = _Job(fn, name)
        self._jobs.put(job)
        self.waker.wake()
        if not job.done.wait(REPLY_S) or job.reply is None:
            return {"ok": False, "error": "the supervisor did not answer in time"}
        return job.reply

    def run_next(self, timeout: float, fds: list[int] | None = None) -> None:
        """Main thread: run the next submitted command, waiting at most `timeout` for one (or a
        signal, a child's end, one of `fds` readable: supervisor.waker)."""
        if self._jobs.empty():
            self.waker.wait(timeout, fds)
        try:
            job = self._jobs.get_nowait()
        except queue.Empty:
            return
        try:
            job.reply = job.fn()
        except CommandError as exc:
            job.reply = {"ok": False, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - report, never die
            job.reply = {"ok": False, "error": boundary.failed("control commands", exc,
                                                               f"control command {job.name!r}")}
        job.done.set()

    # ------------------------------------------------------------ dispatch ----
    def dispatch(self, req: dict[str, Any]) -> Reply:
        """Control-socket entry point (control threads)."""
        cmd = req["cmd"]
        if cmd == "status":
            tail = req.get("tail", TAIL)  # a client drawing narrow sparklines asks for fewer points
            if type(tail) is not int or not 0 <= tail <= TAIL:
                raise CommandError(f"'tail' must be an integer from 0 to {TAIL}")
            return {"ok": True, "status": self.run.snapshot(tail)}
        if cmd == "events":
            since = req.get("since", 0)
            if not isinstance(since, int):
                raise CommandError("'since' must be an integer")
            events, seq = self.log.since(since)
            return {"ok": True, "events": events, "seq": seq}
        if cmd == "history":
            w = self._worker_arg(req.get("rank"))
            with self.lock:
                return {"ok": True, "rank": w.rank, "history": list(w.reports.curve.points)}
        if cmd == "logs":
            return self._logs(req)
        if cmd in RANK_COMMANDS:
            target = req.get("target")
            return self.submit(lambda: self._ranks(cmd, target), cmd)
        if cmd == "resize":
            n = req.get("n")
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise CommandError("resize needs a number of workers of at least 1")
            return self.submit(lambda: {"ok": True, "message": self.run.resize(n)}, cmd)
        if cmd == "stop":
            return self.submit(self._stop, cmd)
        if cmd in ACTIONS or cmd == "set":  # {target | name, value; step, by, plan, args}: supervisor.live
            return self.submit(lambda: self._live(cmd, req), cmd)
        if cmd == "gpu_timeline":  # {"window": SECONDS} -> {"ticks": [GpuTick], "marks": [GpuMark]}
            return {"ok": True, **self.gpu.timeline(req.get("window", 120))}
        raise CommandError(f"unknown command {cmd!r}")

    def _logs(self, req: dict[str, Any]) -> Reply:
        w = self._worker_arg(req.get("rank"))
        stream = req.get("stream", "stderr")
        if stream not in ("stdout", "stderr"):
            raise CommandError("stream must be stdout or stderr")
        n = req.get("lines", 50)
        if not isinstance(n, int) or n < 1:
            raise CommandError("lines must be a positive integer")
        path = layout.log_path(self.store.dir, w.rank, stream)
        return {"ok": True, "rank": w.rank, "stream": stream, "path": str(path),
                "lines": textfiles.tail_lines(path, min(n, 2000))}

    def _worker_arg(self, rank: object) -> Worker:
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise CommandError("rank must be an integer")
        with self.lock:
            w = self.workers.get(rank)
        if w is None:
            raise CommandError(f"no rank {rank} in this run (ranks: {self._ranks_text()})")
        return w

    def _ranks_text(self) -> str:
        ranks = sorted(self.workers)
        return f"0-{ranks[-1]}" if ranks == list(range(len(ranks))) and ranks else ",".join(map(str, ranks))

    def _targets(self, target: object) -> list[Worker]:
        if target == "all":
            return [self.workers[r] for r in sorted(self.workers)]
        if isinstance(target, str):  # "3" from a client that sends text: ASCII digits alone ("²" is none)
            target = numtext.int_of(target)
        return [self._worker_arg(target)]

    # ------------------------------------------------ commands (main thread) ----
    def _ranks(self, cmd: str, target: object) -> Reply:
        if self.run.state in (RunState.STOPPING, RunState.FINISHED):
            raise CommandError(f"the run is {self.run.state}")
        ws = self._targets(target)
        do = {"pause": self._pause, "resume": self._resume, "kill": self._kill, "restart": self._restart,
              "dump": self._dump}[cmd]
        done: list[str] = []
        skipped: list[str] = []
        for w in ws:
            ok, msg = do(w)
            (done if ok else skipped).append(msg)
        if not done:
            raise CommandError("; ".join(skipped))
        text = "; ".join(done) + ("" if not skipped else " (" + "; ".join(skipped) + ")")
        peers = [r for r, p in sorted(self.workers.items()) if p.alive and ws[0].rank != r]
        if cmd == "restart" and len(ws) == 1 and ws[0].attempt.dist and peers:
            # The worker side said torch.distributed is initialised: a rank restarted alone
            # cannot rejoin its peers' process group, so say how to restart them together.
            text += (f"; note: {culprit.ranks_text(peers)} share its process group: their collectives fail "
                     "('restart all' starts the group anew)")
        return {"ok": True, "message": text}

    def _pause(self, w: Worker) -> tuple[bool, str]:
        if not w.alive:
            return False, f"rank {w.rank} is not running ({w.state})"
        if w.state is State.PAUSED:
            return False, f"rank {w.rank} is already paused"
        if not groups.send(w.pgid, signal.SIGSTOP):  # marked paused only once it is
            return False, f"could not pause rank {w.rank}: {_unsignalled(w)}"
        with self.lock:
            w.attempt.paused_at = time.time()
            w.transition(State.PAUSED, "SIGSTOP on request", pid=w.pid)
        return True, f"paused rank {w.rank} (pid {w.pid})"

    def _resume(self, w: Worker) -> tuple[bool, str]:
        if not w.alive:
            return False, f"rank {w.rank} is not running ({w.state})"
        if w.state is not State.PAUSED:
            return False, f"rank {w.rank} is not paused"
        if not groups.send(w.pgid, signal.SIGCONT):
            return False, f"could not resume rank {w.rank}: {_unsignalled(w)}"
        with self.lock:
            w.attempt.resumed, w.attempt.paused_at = time.monotonic(), None
            # Steps/s from the resume on: the pause is no slowness of its own, nor of the ranks
            # of its process group, which waited for it in their collectives (lock-step peers
            # read 1.2 beside its 9.8 steps/s for the length of their window).
            w.attempt.rate.clear()
            if w.attempt.dist:
                for peer in self.workers.values():
                    if peer.attempt.dist and peer.alive:
                        peer.attempt.rate.clear()
            w.transition(State.RUNNING, "SIGCONT on request", pid=w.pid)
        return True, f"resumed rank {w.rank} (pid {w.pid})"

    def _kill(self, w: Worker) -> tuple[bool, str]:
        if not self.run.kill(w, "kill"):
            return False, f"rank {w.rank} is not running ({w.state})"
        return True, (f"killing rank {w.rank} (pid {w.pid}): {self.opts.stop_signal} sent to it, "
                      f"SIGKILL to all of it after {self.opts.grace:g}s")

    def _restart(self, w: Worker) -> tuple[bool, str]:
        if w.alive:
            self.run.kill(w, "restart")
            return True, f"restarting rank {w.rank} (pid {w.pid}): stopping it first"
        w.pending_restart = "restart"
        return True, f"restarting rank {w.rank}"

    def _dump(self, w: Worker) -> tuple[bool, str]:
        if not w.alive:
            return False, f"rank {w.rank} is not running ({w.state})"
        self.dumper.dump_async([w], reason="request")
        return True, (f"dumping rank {w.rank} (pid {w.pid}) to "
                      f"{layout.rank_paths(self.store.dir, w.rank).stacks}")

    def _live(self, cmd: str, req: dict[str, Any]) -> Reply:
        if self.run.state in (RunState.STOPPING, RunState.FINISHED):
            raise CommandError(f"the run is {self.run.state}")
        step, by, plan = req.get("step"), req.get("by", "?"), req.get("plan", False)
        if step is not None and (type(step) is not int or step < 0):
            raise CommandError("'step' must be a step number (0 or more)")
        by = "".join(c if c.isprintable() else "?" for c in str(by))[:80]
        if cmd == "set":
            name, value = req.get("name"), req.get("value")
            if not isinstance(name, str) or not isinstance(value, str):
                raise CommandError("set needs a tunable's name and its value, as text")
            return self.live.set(name, value, step, by, plan is True)
        try:
            args = check_args(cmd, req)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        target = req.get("target")
        ws = self._targets(target)
        return self.live.ask(ACTIONS[cmd], ws, target == "all", step, by, plan is True, args)

    def _stop(self) -> Reply:
        if self.run.state in (RunState.STOPPING, RunState.FINISHED):
            return {"ok": True, "message": f"the run is already {self.run.state}"}
        alive = self.run.stop(STOP_ASKED)
        return {"ok": True,
                "message": f"stopping the run: {self.opts.stop_signal} sent to {alive} worker(s), "
                           f"SIGKILL after {self.opts.grace:g}s"}


def _unsignalled(w: Worker) -> str:
    """Why a signal to a rank's process group failed (its process ended meanwhile, most often)."""
    return f"its process group {w.pgid} could not be signalled (its process has ended, or is not ours)"
