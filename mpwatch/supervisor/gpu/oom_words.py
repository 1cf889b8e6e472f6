"""What a CUDA out-of-memory message says, read from its words: torch's OutOfMemoryError as torch
has worded it and the driver's bare error. Pure; called on the thread that builds an OOM finding
(supervisor.gpu.oom).

    2.x  CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of
         which 1.25 GiB is free. Process 4242 has 30.00 GiB memory in use. Including non-PyTorch
         memory, this process has 40.50 GiB memory in use. Of the allocated memory 38.50 GiB is
         allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated. ...
    1.x  CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 12.08 GiB
         already allocated; 1.05 GiB free; 13.22 GiB reserved in total by PyTorch) ...
    the driver (cudaMalloc outside torch's allocator): CUDA error: out of memory

Each number is looked for on its own, so a wording that lacks one, orders them otherwise or is
cut short still gives the others; what is not said is None (never 0).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

TEXT_MAX = 8192  # characters of a message read
PROCESSES_MAX = 64  # "Process N has ..." entries read

_SIZE = r"([0-9]+(?:\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20,
          "GiB": 1 << 30, "GB": 1 << 30, "TiB": 1 << 40, "TB": 1 << 40}  # torch's sizes are binary
_TRIED = re.compile(r"Tried to allocate " + _SIZE)
_GPU = re.compile(r"\bGPU (\d+)\b")
_TOTAL = (re.compile(r"total capacity of " + _SIZE), re.compile(_SIZE + r" total capacity"))
_FREE = (re.compile(r"of which " + _SIZE + r" is free"), re.compile(r"; " + _SIZE + r" free"))
_ALLOCATED = (re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch"),
              re.compile(_SIZE + r" already allocated"))
_CACHED = re.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated")
_RESERVED = re.compile(_SIZE + r" reserved in total by PyTorch")
_THIS = re.compile(r"this process has " + _SIZE + r" memory in use")
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")


@dataclass(frozen=True)
class OomWords:
    tried: int | None = None  # bytes it tried to allocate
    device: int | None = None  # torch's device index
    total: int | None = None
    free: int | None = None
    allocated: int | None = None  # by PyTorch
    reserved: int | None = None  # by PyTorch
    this_process: int | None = None  # all its memory on the device, the CUDA context included
    processes: tuple[tuple[int, int], ...] = ()  # (pid, bytes) of each process torch listed

    @property
    def cached(self) -> int | None:
        """Reserved but not allocated: the cache's free bytes."""
        if self.reserved is None or self.allocated is None:
            return None
        return max(self.reserved - self.allocated, 0)


def _bytes(m: re.Match[str] | None, at: int = 1) -> int | None:
    if m is None:
        return None
    return round(float(m.group(at)) * _UNITS[m.group(at + 1)])


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for p in patterns:
        v = _bytes(p.search(text))
        if v is not None:
            return v
    return None


def read(text: str | None) -> OomWords:
    """The numbers a CUDA OOM message gives; OomWords() for a message that gives none."""
    if not text:
        return OomWords()
    text = text[:TEXT_MAX]
    gpu = _GPU.search(text)
    allocated = _first(_ALLOCATED, text)
    cached = _bytes(_CACHED.search(text))
    reserved = _bytes(_RESERVED.search(text))
    if reserved is None and allocated is not None and cached is not None:
        reserved = allocated + cached
    procs = tuple((int(m.group(1)), _bytes(m, 2) or 0) for m in _PROCESS.finditer(text))[:PROCESSES_MAX]
    return OomWords(tried=_bytes(_TRIED.search(text)), device=int(gpu.group(1)) if gpu else None,
                    total=_first(_TOTAL, text), free=_first(_FREE, text), allocated=allocated,
                    reserved=reserved, this_process=_bytes(_THIS.search(text)), processes=procs)
