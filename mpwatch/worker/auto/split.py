"""Where an automatic step's time goes between the boundaries the hooks see, with no line of the
script's (training thread; worker.auto.steps owns one, fed by worker.auto.patches):

- forward: from a batch (a DataLoader's __next__ returned) to the top-level backward(); a loop
  without a DataLoader: from the last optimizer step to backward();
- backward: the top-level backward() (DDP all-reduces the gradients in it: the peers of a slow
  rank wait there);
- optimizer: from backward()'s end to the optimizer step's (clipping, GradScaler's unscale, the
  step; FSDP's collectives in it);
- the data phase is worker.auto.steps' own (the time inside __next__).
The rest is no phase (after an optimizer step until the next batch: logging, a checkpoint save,
zero_grad; an evaluation's batches and their forward, which no backward() ends): the pace calls
it `other`. Gradient accumulation adds each micro-batch's forward and backward to its step's.

For CUDA work the CPU's times are kernel launches: once the process's losses are on CUDA,
`gpu` (worker.auto.gpu_times) records an event at the same boundaries on the current stream, and
the step's GPU times are read off this thread, never waited for here.
"""
from __future__ import annotations

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
PENDING = "pending"  # after an optimizer step: forward if backward() comes first, nothing if a batch does

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from mpwatch.worker.auto.gpu_times import GpuTimes, Pair


class Split:
    """One process's step split into phases (training thread)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.times: dict[str, float] = {}  # this step's seconds in each phase, so far
        self.since: float | None = None  # the last boundary
        self.phase: str | None = PENDING  # the phase the time since `since` is in (None: no phase)
        self.gpu: GpuTimes | None = None  # events at the boundaries, once the losses are on CUDA
        self.event: object = None  # the event recorded at the last boundary
        self.pairs: list[Pair] = []  # this step's (phase, its first event, its last event)

    def reset(self) -> None:
        """In a forked child: its own steps, and no CUDA (the parent's events are not its own)."""
        self.times, self.since, self.phase = {}, None, PENDING
        self.gpu, self.event, self.pairs = None, None, []

    def _at(self, counted: str | None, then: str | None) -> None:
        """A boundary: the time since the last one is in `counted` (None: no phase); `then`
        is the phase from here on."""
        now = self.clock()
        if counted is not None and self.since is not None:
            self.times[counted] = self.times.get(counted, 0.0) + (now - self.since)
        gpu = self.gpu
        if gpu is not None:
            event = gpu.mark()
            if counted is not None and self.event is not None:
                self.pairs.append((counted, self.event, event))
            self.event = event
        self.since, self.phase = now, then

    # -- the hooks' boundaries ---------------------------------------------------------------------
    def batch_start(self) -> None:
        self._at(None, None)  # a forward no backward() ended (an evaluation), or after an optimizer step

    def batch_end(self) -> None:
        self._at(None, FORWARD)

    def backward_start(self) -> None:
        self._at(FORWARD if self.phase in (FORWARD, PENDING, OPTIMIZER) else None, BACKWARD)

    def backward_end(self) -> None:
        self._at(BACKWARD, OPTIMIZER)

    def optimizer_end(self) -> None:
        self._at(OPTIMIZER if self.phase in (OPTIMIZER, PENDING) else None, PENDING)

    def take(self) -> tuple[dict[str, float], list[Pair]]:
        """At a step's count: its CPU times and its GPU pairs, and a fresh start for the next."""
        times, pairs = self.times, self.pairs
        self.times, self.pairs = {}, []
        return times, pairs
