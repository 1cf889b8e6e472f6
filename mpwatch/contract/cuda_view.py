"""A worker's CUDA view: what torch's caching allocator says, as the worker side sends it in a
BATCH (`cuda`) and the status shows it (WorkerGpu.cuda). A leaf of the contract: it imports
nothing of mpwatch, so the wire format (contract.protocol) and the worker side name it without
pulling in the status schema. contract.status re-exports it. Pure.
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
