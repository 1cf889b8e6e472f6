"""The loss of an automatic step, taken on the training thread without ever waiting for the
device, and read on the sender thread.

`Capture.take` runs inside backward() on the training thread: a CPU scalar is kept as it is
(detached: the graph is not kept alive); a CUDA scalar is copied `non_blocking` into one slot
of a pinned host ring, and a CUDA event is recorded after the copy on the tensor's stream.
Nothing there waits for the device, and `.item()` is never called there.

`StepLoss` is what a step puts in the worker's buffer (mpwatch.worker.channel): the sender thread asks
`ready()` before it takes the entry (the events of its CUDA parts have completed, or waited
READY_WAIT_S: the step then goes without its loss rather than hold back the heartbeat), then
`float()` reads it: CPU tensors converted there, CUDA slots read from the host ring. Several
losses in one step (gradient accumulation) give their mean; a step whose optimizer step()
returned a loss (`optimizer.step(closure)`) has that one alone (`Capture.returned`).
"""
from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from mpwatch.worker.auto.gpu_times import GpuTimes, Pair

    Tensor = Any  # torch.Tensor: this package never imports torch itself

RING = 8192  # pinned float32 slots: far more than the losses a flush leaves unread
READY_WAIT_S = 10.0  # a step whose CUDA loss is not there after this goes without it
UNSCALED = "_mpwatch_unscaled"  # set by the GradScaler hook: the loss before scaling


class CudaRing:
    """A pinned host buffer the device copies losses into; made at the first CUDA loss."""

    def __init__(self, torch: ModuleType):
        self.torch = torch
        self.buf = torch.empty(RING, dtype=torch.float32, pin_memory=True)
        self.next = 0

    def put(self, t: Tensor) -> tuple[int, object]:
        """Training thread: (slot, event). The copy and the event are queued on the loss's stream."""
        torch = self.torch
        i = self.next
        self.next = (i + 1) % RING
        self.buf[i].copy_(t, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(t.device))
        return i, ev

    def read(self, i: int) -> float:
        """Sender thread, once the slot's event has completed: host memory, no device call."""
        return float(self.buf[i].item())


class Capture:
    """Turns the tensors passed to a top-level backward() into loss parts (training thread)."""

    def __init__(self, torch: ModuleType):
        self.torch = torch
        self.tensor_type = torch.Tensor
        self.ring: CudaRing | None = None

    def reset(self) -> None:
        """In a forked child: CUDA is not usable there, and the ring was the parent's."""
        self.ring = None

    def take(self, tensors: Tensor, grads: Any, parts: list[object]) -> None:
        """Add the scalar losses among `tensors` (a tensor or a sequence) to `parts`. A tensor
        given with a gradient of its own is no loss (a pipeline stage's output)."""
        if grads is not None and not isinstance(grads, (list, tuple)):
            return
        if type(tensors) is self.tensor_type:
            self._one(tensors, parts)
        elif isinstance(tensors, (list, tuple)):
            for i, t in enumerate(tensors):
                if type(t) is self.tensor_type and (grads is None or i >= len(grads) or grads[i] is None):
                    self._one(t, parts)

    def returned(self, value: object) -> list[object] | None:
        """What an optimizer's step() returned, as the step's loss (one part): a scalar tensor
        (a closure's loss) or a number; None for anything else."""
        if type(value) is self.tensor_type:
            parts: list[object] = []
            self._one(value, parts)
            return parts or None
        if type(value) in (float, int):
            return [float(value)]  # type: ignore[arg-type]  # a float or an int, checked above
        return None

    def _one(self, t: Tensor, parts: list[object]) -> None:
        t = t.__dict__.get(UNSCALED, t)  # what GradScaler.scale was given
        if t.numel() != 1:
            return
        if t.is_cpu:
            parts.append(t.detach())
        elif t.is_cuda:
            if self.ring is None:
                self.ring = CudaRing(self.torch)
            parts.append(self.ring.put(t.detach().reshape(())))
        # other devices (mps, xla, meta): reading them may wait for the device; no loss then


class StepLoss:
    """One step's loss as the sender reads it: the mean of its parts; and its GPU times, where its
    boundaries were CUDA events (worker.auto.gpu_times)."""

    __slots__ = ("gpu", "made", "pairs", "parts", "ring")

    def __init__(self, parts: list[object], ring: CudaRing | None, gpu: GpuTimes | None = None,
                 pairs: list[Pair] | None = None):
        self.parts = parts
        self.ring = ring
        self.gpu = gpu
        self.pairs = pairs or []
        self.made = time.monotonic()

    def ready(self) -> bool:
        """Sender thread: every CUDA part's event and every boundary's has completed (or waited
        too long: the step goes without them)."""
        late = time.monotonic() - self.made > READY_WAIT_S
        for p in self.parts:
            if type(p) is tuple and not p[1].query():
                return late
        if self.pairs and self.gpu is not None and not self.gpu.done(self.pairs):
            return late
        return True

    def gpu_phases(self) -> dict[str, float] | None:
        """Sender thread, once ready(): the step's GPU seconds in each phase, read once (None:
        no boundary on CUDA, or its events never completed)."""
        gpu, pairs = self.gpu, self.pairs
        self.pairs = []
        if gpu is None or not pairs or not gpu.done(pairs):
            return None
        return gpu.read(pairs)

    def __float__(self) -> float:
        vals = []
        ring = self.ring
        for p in self.parts:
            if type(p) is tuple:
                if ring is not None and p[1].query():
                    vals.append(ring.read(p[0]))
            else:
                vals.append(float(p))  # type: ignore[arg-type]  # a detached CPU tensor
        if not vals:
            raise ValueError("no loss read")
        return sum(vals) / len(vals)
