"""A step's GPU times: CUDA events recorded at the split's boundaries (worker.auto.split) on the
training thread, on the current stream, never waited for there; their elapsed times read on the
sender thread once every event of the step has completed (worker.auto.loss's StepLoss carries
the pairs, and holds its step back until then, as it does for a CUDA loss).

Events are made with timing on and kept in a pool for the next steps once read: a step costs
four event records, no allocation. Stdlib only: torch is the module the script imported.
"""
from __future__ import annotations

from collections import deque

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    Pair = tuple[str, Any, Any]  # (phase, the event at its start, the event at its end)

POOL = 256  # events kept for reuse


class GpuTimes:
    """One process's CUDA events for its steps' boundaries."""

    def __init__(self, torch: ModuleType):
        self.torch = torch
        self.pool: deque[Any] = deque()  # events read and free again (the sender returns them)

    def mark(self) -> Any:
        """Training thread: an event recorded now on the current stream (queued, not waited for)."""
        try:
            event = self.pool.pop()
        except IndexError:
            event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def done(self, pairs: list[Pair]) -> bool:
        """Sender thread: every event of these pairs has completed."""
        return all(a.query() and b.query() for _, a, b in pairs)

    def read(self, pairs: list[Pair]) -> dict[str, float]:
        """Sender thread, once done(): seconds of GPU time in each phase. The events go back to
        the pool (one shared by two pairs once), but the step's last: the split may have begun
        the next step's first pair with it."""
        out: dict[str, float] = {}
        freed: dict[int, Any] = {}
        for phase, a, b in pairs:
            out[phase] = out.get(phase, 0.0) + a.elapsed_time(b) / 1000.0
            freed[id(a)], freed[id(b)] = a, b
        if pairs:
            freed.pop(id(pairs[-1][2]), None)
        if len(self.pool) + len(freed) <= POOL:
            self.pool.extend(freed.values())
        return out
