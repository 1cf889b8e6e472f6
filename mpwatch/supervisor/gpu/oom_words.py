"""What a CUDA out-of-memory message says, read from its words: torch's OutOfMemoryError as torch
has worded it and the driver's bare error. Pure; called on the thread that builds an OOM finding
(supervisor.gpu.oom_story).

    2.x  CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of
         which 1.25 GiB is free. Process 4242 has 30.00 GiB memory in use. Including non-PyTorch
         memory, this process has 40.50 GiB memory in use. Of the allocated memory 38.50 GiB is
         allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated. ...
    1.x  CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 12.08 GiB
         already allocated; 1.05 GiB free; 13.22 GiB reserved in total by PyTorch) ...
    the driver (cudaMalloc outside torch's allocator): CUDA error: out of memory

Each number is looked for on its own, so a wording that lacks one, orders them otherwise or is
cut short still gives the others; what is not said is None (never 0). Total and bounded: any
text gives OomWords (its first TEXT_MAX characters read); a number is ASCII digits within
contract.numtext's bounds (a size of 320 digits, or one past BYTES_MAX, is not said: None), so
no float overflows and no int() meets thousands of digits.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

from mpwatch.contract import numtext

TEXT_MAX = 8192  # characters of a message read
PROCESSES_MAX = 64  # "Process N has ..." entries read
BYTES_MAX = 1 << 60  # a size past this (a number of 300 digits: inf as a float) is no size: not known

# a size: a whole number (never the tail of a longer one), then its unit
_SIZE = r"(?<![0-9.])(" + numtext.DECIMAL + r") ?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20,
          "GiB": 1 << 30, "GB": 1 << 30, "TiB": 1 << 40, "TB": 1 << 40}  # torch's sizes are binary


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII)  # \b and \d of ASCII alone


_TRIED = _re(r"Tried to allocate " + _SIZE)
_GPU = _re(r"\bGPU ([0-9]{1,4})\b")
_TOTAL = (_re(r"total capacity of " + _SIZE), _re(_SIZE + r" total capacity"))
_FREE = (_re(r"of which " + _SIZE + r" is free"), _re(r"; " + _SIZE + r" free"))
_ALLOCATED = (_re(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch"),
              _re(_SIZE + r" already allocated"))
_CACHED = _re(r"and " + _SIZE + r" is reserved by PyTorch but unallocated")
_RESERVED = _re(_SIZE + r" reserved in total by PyTorch")
_THIS = _re(r"this process has " + _SIZE + r" memory in use")
_PROCESS = _re(r"Process ([0-9]{1,10}) has " + _SIZE + r" memory in use")

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
    """The size a match says, in bytes; None when there is none or it is past BYTES_MAX."""
    if m is None:
        return None
    number = numtext.decimal_of(m.group(at))
    if number is None:
        return None
    size = number * _UNITS[m.group(at + 1)]  # < 10**15 * 2**40: finite
    return round(size) if size <= BYTES_MAX else None


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
    procs = tuple((pid, size) for m in islice(_PROCESS.finditer(text), PROCESSES_MAX)
                  if (pid := numtext.int_of(m.group(1))) is not None and (size := _bytes(m, 2)) is not None)
    return OomWords(tried=_bytes(_TRIED.search(text)), device=numtext.int_of(gpu.group(1)) if gpu else None,
                    total=_first(_TOTAL, text), free=_first(_FREE, text), allocated=allocated,
                    reserved=reserved, this_process=_bytes(_THIS.search(text)), processes=procs)
