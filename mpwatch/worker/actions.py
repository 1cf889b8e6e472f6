"""The actions this process runs itself at a step boundary (protocol.STEP_ACTIONS: a profile, a
CUDA memory snapshot),
asked by the supervisor at one step on every rank (contract.actions says what each is).

The sender thread hands each request to worker.control_state (ControlState.receive), which
queues it and lowers the process's `act_due` (worker.channel's ProcessState). The training
thread's step boundaries, worker.api's report() with a step and the automatic steps (their
optimizer hook), compare the step with `act_due`, one compare, and once it is reached call
ControlState.at_step, which hands the requests to `StepActions.at_step` here: it starts what is
due (the runner RUNNERS names for the action, imported then), shows what runs the step (a
profile stops after its N steps), and says the next step it must be called at.

An action answers twice through the control state's outbox (any thread): "done" when it
starts (the step, and whether that was past the step asked: late), "result" with its outcome.
A runner's failure is its result, never an exception in the training loop. Stdlib only; loaded
with the control state (a request came, or the script called should_checkpoint()/tunable()).
"""
from __future__ import annotations

import atexit
import functools
import os
from importlib import import_module

from mpwatch.contract import protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    # step (None: at the next boundary), id, action, the request's frame
    Request = tuple[int | None, int, str, dict[str, object]]

    class Answers(Protocol):
        """Where an action's answers go (worker.control_state's ControlState)."""

        @property
        def rank(self) -> int: ...

        def answer(self, rid: int, at: int | None, step: int) -> None: ...
        def result(self, rid: int, fields: dict[str, object]) -> None: ...

    class Session(Protocol):
        """An action under way (a runner's `begin` returns one)."""

        rid: int
        next_step: int  # the step it wants to see next (at_step is called once the process reaches it)

        def at_step(self, step: int) -> bool: ...  # True: it is over (it left, or hands off, its result)
        def at_exit(self) -> None: ...  # the process exits while it runs: finish what can be

# action -> the module whose begin() runs it
RUNNERS = {protocol.PROFILE: "mpwatch.worker.profile", protocol.MEMORY: "mpwatch.worker.memory_action"}
NEVER = 1 << 62


class StepActions:
    """This process's actions queued and under way (training thread, but `at_exit`)."""

    def __init__(self, answers: Answers):
        self.answers = answers
        self.queued: list[Request] = []
        self.running: dict[str, Session] = {}  # action -> its session (one of each at a time)
        self.pid = os.getpid()
        self.exit_hooked = False

    def queue(self, req: Request) -> None:
        self.queued.append(req)

    def due(self) -> int:
        """The next step at which at_step must run (NEVER: nothing queued or running)."""
        steps = [-NEVER if r[0] is None else r[0] for r in self.queued]
        steps += [s.next_step for s in self.running.values()]
        return min(steps, default=NEVER)

    def at_step(self, step: int) -> None:
        """A step boundary at `step`: what runs sees it, then what is due starts."""
        for name, session in list(self.running.items()):
            over = functools.partial(session.at_step, step)
            if step >= session.next_step and self._guarded(session.rid, over):
                del self.running[name]
        later = []
        for req in self.queued:
            if req[0] is None or req[0] <= step:
                self._start(req, step)
            else:
                later.append(req)
        self.queued = later

    def _start(self, req: Request, step: int) -> None:
        at, rid, name, frame = req
        busy = self.running.get(name)
        if busy is not None:
            self.answers.result(rid, {"state": "failed", "why": f"request #{busy.rid} runs it still"})
            return
        session = None

        def begin() -> bool:
            nonlocal session
            session = import_module(RUNNERS[name]).begin(self.answers, rid, at, step, frame)
            return session is None

        if not self._guarded(rid, begin) and session is not None:
            self.running[name] = session
            if not self.exit_hooked:
                self.exit_hooked = True
                atexit.register(self.at_exit)

    def _guarded(self, rid: int, call: Callable[[], object]) -> bool:
        """call() (True: over); an exception is the request's failure, and it is over."""
        try:
            return bool(call())
        except Exception as exc:  # noqa: BLE001 - an action's bug must never reach the training loop
            self.answers.result(rid, {"state": "failed", "why": f"{type(exc).__name__}: {exc}"[:300]})
            return True

    def at_exit(self) -> None:
        """At interpreter exit (the training thread's, for a script that ends in its loop):
        what runs finishes as it can, before the sender's last flush (atexit runs it first)."""
        if os.getpid() != self.pid:
            return  # a forked child inherited the hook: the sessions were its parent's
        for session in list(self.running.values()):
            self._guarded(session.rid, session.at_exit)
        self.running.clear()

    def after_fork(self) -> None:
        """In a forked child: nothing of the parent's runs here."""
        self.queued, self.running = [], {}
        self.pid = os.getpid()
        self.exit_hooked = False
