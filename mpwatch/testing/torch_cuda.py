"""A stand-in for the few calls of torch's CUDA API that mpwatch's memory forensics make
(worker.cuda_memory), played from the scripted CUDA view's scenario (testing.cuda,
MPWATCH_SCRIPTED_CUDA) where there is no GPU (tests, CI). Each has torch's own name and
arguments, so the code that calls them is the code that runs on a GPU:

    torch.cuda._lazy_call(fn)                 queued until the process initialises CUDA
    torch.cuda.init(), is_initialized(), is_available(), device_count()
    torch.cuda.caching_allocator_alloc(size, device=None, stream=None)
        a new segment when the device has the room, a block of the cache when the cache's
        largest free block holds it; else as torch fails: num_ooms + 1, each OOM observer
        called with (device, size, total, free), then OutOfMemoryError with torch's message
    torch.cuda.memory_stats(device=None)      memory_stats()'s flat counters
    torch.cuda.get_device_properties(device)  .uuid, .total_memory, .name
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all", max_entries=...)
    torch.cuda.memory._snapshot(device=None)  a snapshot in pytorch.org/memory_viz's format
                                              (testing.torch_snapshot)
    torch._C._cuda_attach_out_of_memory_observer(observer)
    torch.cuda.OutOfMemoryError

The allocator's state is the rank's scenario frame (allocated, reserved, device) with three
keys of its own: total (the device's memory; default 80 GiB), free (what CUDA says is free;
default total - reserved - the context) and cache_block (the largest free block in the cache;
default all of reserved - allocated: no fragmentation). What it allocates and the OOMs it
raises are added to the view the sender reports (ScriptedCuda.extra).

The process's one instance is made by testing.cuda.serve when the scenario is set (`install`), and a
script finds it with `current()`. Standard library only; any thread may call it.
"""
from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque

from mpwatch.testing import torch_snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from mpwatch.testing.cuda import ScriptedCuda

    Observer = Callable[[int, int, int, int], object]

GiB = 1 << 30
DEFAULT_TOTAL = 80 * GiB
CONTEXT = 512 << 20  # what a CUDA context takes besides torch's reserve ("non-PyTorch memory")
SEGMENT = 2 << 20  # a new segment is a multiple of this, as torch's large pool rounds it
STACK_MAX = 32  # frames an allocation records


class OutOfMemoryError(RuntimeError):
    """What the scripted allocator raises."""


# Spelled as torch's (torch.OutOfMemoryError), so the script's traceback reads as on a GPU.
OutOfMemoryError.__module__ = "torch"


def format_size(n: int) -> str:
    """A size as torch spells it in its OOM message (c10's format_size)."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1 << 20:
        return f"{n / 1024:.2f} KiB"
    if n <= 1 << 30:
        return f"{n / (1 << 20):.2f} MiB"
    return f"{n / (1 << 30):.2f} GiB"


def oom_message(device: int, size: int, total: int, free: int, allocated: int, reserved: int) -> str:
    """torch 2.x's OutOfMemoryError message, word for word (without its per-process lines,
    as when its NVML query fails)."""
    fs = format_size
    return (f"CUDA out of memory. Tried to allocate {fs(size)}. GPU {device} has a total capacity of "
            f"{fs(total)} of which {fs(free)} is free. Including non-PyTorch memory, this process has "
            f"{fs(reserved + CONTEXT)} memory in use. Of the allocated memory {fs(allocated)} is allocated "
            f"by PyTorch, and {fs(reserved - allocated)} is reserved by PyTorch but unallocated. {_ADVICE}")


_ADVICE = ("If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
           "Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html"
           "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")


def _int(frame: dict[str, object], key: str, default: int) -> int:
    v = frame.get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


class Props:
    """torch.cuda.get_device_properties()'s answer, the fields read here."""

    def __init__(self, uuid: str, total: int):
        self.uuid = uuid
        self.total_memory = total
        self.name = "scripted GPU"


class ScriptedTorch:
    """The process's scripted torch: `.cuda`, `.cuda.memory` and `._C` as torch has them."""

    def __init__(self, view: ScriptedCuda):
        self.view = view
        self.lock = threading.Lock()
        self.initialized = False
        self.queued: list[Callable[[], object]] = []
        self.observers: list[Observer] = []
        self.history: dict[str, object] | None = None  # _record_memory_history's settings, while on
        self.trace: deque[dict[str, object]] = deque()
        self.segments: list[torch_snapshot.Segment] = []  # what it allocated itself, each its own
        self.from_cache = 0  # bytes it took from the cache's largest free block
        self.cuda = Cuda(self)
        self._C = C(self)

    # ---------------------------------------------------------------- state ----
    def frame(self) -> tuple[int, int, int, int, int, int]:
        """(device, allocated, reserved, total, free, cache block) now, its own allocations in."""
        fr = self.view.current()
        n = self.view.numbers(fr)
        allocated, reserved = n.get("allocated", 0), n.get("reserved", 0)
        total = _int(fr, "total", DEFAULT_TOTAL)
        base_reserved = reserved - self.view.extra["reserved"]
        free = _int(fr, "free", max(total - base_reserved - CONTEXT, 0)) - self.view.extra["reserved"]
        block = _int(fr, "cache_block", reserved - allocated + self.from_cache) - self.from_cache
        block = max(min(block, reserved - allocated), 0)
        return n.get("device", 0), allocated, reserved, total, max(free, 0), block

    def init(self) -> None:
        """torch.cuda._lazy_init: the queued calls run, once."""
        with self.lock:
            if self.initialized:
                return
            self.initialized = True
            calls, self.queued = self.queued, []
        for fn in calls:
            fn()

    def frames(self) -> list[dict[str, object]]:
        """The caller's stack, innermost first, as torch records it (with the history on)."""
        if self.history is None or self.history.get("context") in (None, "state"):
            return []
        stack = traceback.extract_stack()[:-3]  # less caching_allocator_alloc and this
        return [{"filename": f.filename, "line": f.lineno or 0, "name": f.name}
                for f in reversed(stack)][:STACK_MAX]

    def record(self, action: str, **fields: object) -> None:
        if self.history is None or self.history.get("enabled") != "all":
            return
        entry: dict[str, object] = {"action": action, "stream": 0, "time_us": int(time.time() * 1e6),
                                    **fields}
        self.trace.append(entry)
        cap = self.history.get("max_entries")
        while isinstance(cap, int) and len(self.trace) > cap:
            self.trace.popleft()

    # ------------------------------------------------------------ allocating ----
    def alloc(self, size: int) -> int:
        self.init()
        frames = self.frames()
        with self.lock:
            device, allocated, reserved, total, free, block = self.frame()
            if 0 < size <= block:  # a block of the cache
                self.from_cache += size
                self.view.extra["allocated"] += size
                addr = torch_snapshot.BASE + allocated  # inside the first segment
                self.record("alloc", addr=addr, size=size, frames=frames)
                return addr
            rounded = -(-max(size, 1) // SEGMENT) * SEGMENT
            if rounded <= free:
                addr = torch_snapshot.next_address(self.segments)
                seg = torch_snapshot.Segment(addr, rounded, size, frames)
                self.segments.append(seg)
                self.view.extra["allocated"] += rounded
                self.view.extra["reserved"] += rounded
                self.record("segment_alloc", addr=seg.address, size=rounded, frames=frames)
                self.record("alloc", addr=seg.address, size=rounded, frames=frames)
                return seg.address
            self.view.extra["num_ooms"] += 1
            self.record("oom", size=size, device_free=free, frames=frames)
            observers = list(self.observers)
        for obs in observers:  # as torch: outside the allocator's lock, before it raises
            obs(device, size, total, free)
        raise OutOfMemoryError(oom_message(device, size, total, free, allocated, reserved))

    def stats(self) -> dict[str, int]:
        n = self.view.numbers(self.view.current())
        return {"allocated_bytes.all.current": n.get("allocated", 0),
                "allocated_bytes.all.peak": n.get("max_allocated", 0),
                "reserved_bytes.all.current": n.get("reserved", 0),
                "inactive_split_bytes.all.current": n.get("inactive_split", 0),
                "num_alloc_retries": n.get("alloc_retries", 0), "num_ooms": n.get("num_ooms", 0)}

    def snapshot(self) -> dict[str, object]:
        with self.lock:
            device, allocated, reserved, _, _, block = self.frame()
            own = sum(s.size for s in self.segments)
            stacks = self.history is not None and self.history.get("context") not in (None,)
            base = torch_snapshot.base_segment(device, allocated - own, reserved - own, block,
                                                  self.view.path if stacks else None)
            return torch_snapshot.snapshot(device, base, self.segments, list(self.trace))


class Memory:
    """torch.cuda.memory."""

    def __init__(self, t: ScriptedTorch):
        self._t = t

    def _record_memory_history(self, enabled: str | None = "all", context: str | None = "all",
                               stacks: str = "all", max_entries: int = sys.maxsize, device: object = None,
                               clear_history: bool = False, **more: object) -> None:
        t = self._t
        with t.lock:
            t.history = None if enabled is None else {
                "enabled": enabled, "context": context, "stacks": stacks, "max_entries": max_entries}
            if clear_history or enabled is None:
                t.trace.clear()

    def _snapshot(self, device: object = None, augment_with_fx_traces: bool = False) -> dict[str, object]:
        return self._t.snapshot()


class Cuda:
    """torch.cuda."""

    OutOfMemoryError = OutOfMemoryError

    def __init__(self, t: ScriptedTorch):
        self._t = t
        self.memory = Memory(t)

    def _lazy_call(self, callable: Callable[[], object], **kwargs: object) -> None:
        t = self._t
        with t.lock:
            if not t.initialized:
                t.queued.append(callable)
                return
        callable()

    def init(self) -> None:
        self._t.init()

    def is_initialized(self) -> bool:
        return self._t.initialized

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self._t.frame()[0] + 1

    def caching_allocator_alloc(self, size: int, device: object = None, stream: object = None) -> int:
        return self._t.alloc(int(size))

    def memory_stats(self, device: object = None) -> dict[str, int]:
        return self._t.stats()

    def get_device_properties(self, device: object = None) -> Props:
        fr = self._t.view.current()
        uuid = fr.get("uuid")
        return Props(uuid if isinstance(uuid, str) else "GPU-scripted", _int(fr, "total", DEFAULT_TOTAL))


class C:
    """torch._C, the one call made here."""

    def __init__(self, t: ScriptedTorch):
        self._t = t

    def _cuda_attach_out_of_memory_observer(self, observer: Observer) -> None:
        with self._t.lock:
            self._t.observers.append(observer)


_current: ScriptedTorch | None = None


def install(view: ScriptedCuda) -> ScriptedTorch:
    """This process's scripted torch, on its scripted view (testing.cuda.serve, at `import mpwatch`)."""
    global _current
    _current = ScriptedTorch(view)
    return _current


def current() -> ScriptedTorch | None:
    """The scripted torch of this process, or None where the CUDA view is not scripted."""
    return _current
