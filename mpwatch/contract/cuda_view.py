"""A worker's CUDA view: what torch's caching allocator says, as the worker side sends it in a
BATCH (`cuda`) and the status shows it (WorkerGpu.cuda); and a CUDA out-of-memory as the worker
saw it (`OomRecord`, a BATCH's `oom`: mpwatch.worker.cuda_memory). A leaf of the contract: it imports
nothing of mpwatch, so the wire format (contract.protocol) and the worker side name it without
pulling in the status schema. Readers import it from mpwatch.contract. Pure.
"""
from __future__ import annotations

import sys
from typing import TypedDict

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired


class CudaView(TypedDict):
    """What torch's caching allocator says, sent by the worker at most once a second and
    only when the script already initialised CUDA (the worker never initialises it)."""

    device: int  # torch's device index (under CUDA_VISIBLE_DEVICES: not NVML's index)
    allocated: int  # bytes in live tensors
    reserved: int  # bytes held by the caching allocator
    max_allocated: int  # peak of `allocated`
    uuid: NotRequired[str | None]  # "GPU-…" (or "MIG-…"): how the supervisor finds NVML's index
    alloc_retries: NotRequired[int]  # memory_stats()["num_alloc_retries"]: cache flushes to fit
    num_ooms: NotRequired[int]  # memory_stats()["num_ooms"]
    inactive_split: NotRequired[int]  # memory_stats()["inactive_split_bytes.all.current"]


class OomRecord(TypedDict):
    """A CUDA out-of-memory the worker saw, at the moment it happened: torch's OOM observer (it
    fires whether or not the script catches the exception) gives what it tried to allocate and
    what the driver had free, the allocator's counters are read then, and the snapshot is
    written then (with --cuda-memory-history); an uncaught OutOfMemoryError adds its message.
    Sent in a BATCH's `oom` list; a later record with the same `seq` completes an earlier one
    (a field None there is not known yet)."""

    seq: int  # the process's OOMs so far: 1 for its first
    ts: float  # the worker's wall clock
    device: int | None  # torch's device index
    uuid: str | None  # as NVML spells it ("GPU-…", "MIG-…")
    alloc: int | None  # bytes it tried to allocate
    total: int | None  # the device's memory (or the fraction the allocator may use)
    free: int | None  # what CUDA said was free on the device
    allocated: int | None  # torch allocated, at the OOM
    reserved: int | None  # torch reserved, at the OOM (after it released what it could)
    inactive_split: int | None  # reserved bytes in split blocks (memory_stats' inactive_split_bytes)
    snapshot: str | None  # the allocator snapshot written at the OOM (its path), else None
    snapshot_error: str | None  # why a snapshot asked for was not written
    message: str | None  # the exception's message, when the worker saw it raised to the top
