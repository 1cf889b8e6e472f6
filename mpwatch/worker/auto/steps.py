"""What counts as a step of a script that never calls report(), and where its time went.

`Steps` is one process's counter, fed by the hooks (mpwatch.worker.auto.patches) on the training
thread and nothing else; it never touches torch itself, so its rules test without it.

- An optimizer step counts when a top-level backward() ran since the last step counted: the
  optimizers a loop steps one after another after one backward() (an encoder's and a
  decoder's) make one step; a loop that never calls backward() (torch.autograd.grad) counts
  each optimizer step.
- A step GradScaler skipped (inf or NaN gradients: the optimizer's own step never runs) still
  counts when the scaler's step() returns: the loop went round.
- A process that made no optimizer (it updates its parameters by hand) counts each top-level
  backward(). One that made one never does, so gradient accumulation (backward() several
  times, then one optimizer step) is one step, its loss the mean of the accumulated ones.
- An optimizer step's loss is what its step() returned, where it returned one: with a closure
  (`optimizer.step(closure)`: LBFGS evaluates it up to 20 times, and returns the first) that is
  the closure's loss; else the mean of the step's backward() losses. So the step counts when its
  outermost step() returns (`stepping` holds the count torch's hook asked for until then).
- Time inside a DataLoader iterator's __next__ is `data`; forward, backward and optimizer are
  worker.auto.split's; the rest of the step is in no phase.
- Between steps (an evaluation loop, after the first step), a DataLoader batch is a heartbeat
  without a step, at most once every BEAT_S: a long evaluation is progress, not a stall.
"""
from __future__ import annotations

import time

from mpwatch.worker.auto.split import Split

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from mpwatch.worker.auto.gpu_times import Pair

    # (step, the loss parts since the last step, its seconds in each phase, its GPU boundaries);
    # a heartbeat without a step is (None, [], {}, [])
    Emit = Callable[[int | None, list[object], dict[str, float], list[Pair]], None]

BEAT_S = 1.0  # between steps, a DataLoader batch is a heartbeat at most this often


class Steps:
    """One process's automatic step count (training thread)."""

    def __init__(self, emit: Emit, clock: Callable[[], float] = time.perf_counter):
        self.emit = emit
        self.clock = clock
        self.step = 0
        self.has_optimizer = False  # an optimizer was made here: backward() alone is no step
        self.saw_backward = False
        self.counted_since_backward = False
        self.depth = 0  # top-level backward() calls running (a nested one is part of them)
        self.data_depth = 0  # DataLoader __next__ calls running (one iterating another counts once)
        self.parts: list[object] = []  # this step's losses (auto.loss makes them a number)
        self.data_s = 0.0  # this step's time in a DataLoader's __next__
        self.split = Split(clock)  # where the rest of its time goes
        self.sent = 0.0  # when the last step or heartbeat was emitted
        self.stepping = 0  # optimizer step() calls running (an optimizer may step another)
        self.step_asked = False  # torch's hook said an optimizer stepped, inside a step() still running

    def reset(self) -> None:
        """In a forked child (a Hogwild trainer): its own count from 0."""
        self.step = 0
        self.saw_backward = self.counted_since_backward = False
        self.depth = self.data_depth = 0
        self.parts = []
        self.data_s = 0.0
        self.split.reset()
        self.sent = 0.0
        self.stepping = 0
        self.step_asked = False

    # -- what the hooks say ----------------------------------------------------------
    def batch_start(self) -> None:
        """A DataLoader's __next__ begins."""
        self.split.batch_start()

    def data(self, seconds: float) -> None:
        """A DataLoader batch came after `seconds` in its __next__."""
        self.data_s += seconds
        self.split.batch_end()
        if self.step:
            now = self.clock()
            if now - self.sent >= BEAT_S:
                self.sent = now
                self.emit(None, [], {}, [])

    def backward_start(self) -> None:
        """A top-level backward() begins."""
        self.split.backward_start()

    def backward_done(self) -> None:
        """A top-level backward() returned (its losses are in `parts` already)."""
        self.split.backward_end()
        self.saw_backward = True
        self.counted_since_backward = False
        if not self.has_optimizer:
            self.count()

    def optimizer_stepped(self) -> None:
        """torch's hook: an optimizer stepped (inside its step(), when that is wrapped)."""
        if self.stepping:
            self.step_asked = True  # counted when step() returns, with what it returned
            return
        self.split.optimizer_end()
        if not self.counted_since_backward or not self.saw_backward:
            self.count()

    def step_returned(self, loss: list[object] | None) -> None:
        """The outermost optimizer step() returned; `loss` is the loss it returned (one part),
        None when it returned none (the backward() losses stand)."""
        if not self.step_asked:
            return
        self.step_asked = False
        if loss is not None:
            self.parts = loss
        self.optimizer_stepped()

    def scaler_stepped(self) -> None:
        """GradScaler.step returned: counts only when the optimizer did not (a skipped step)."""
        if self.saw_backward and not self.counted_since_backward:
            self.split.optimizer_end()
            self.count()

    # -- a step --------------------------------------------------------------------
    def count(self) -> None:
        times, pairs = self.split.take()
        times["data"] = self.data_s
        parts = self.parts
        self.step += 1
        self.counted_since_backward = True
        self.parts = []
        self.data_s = 0.0
        self.sent = self.clock()
        self.emit(self.step, parts, times, pairs)
