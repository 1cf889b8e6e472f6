"""A scripted allocator view, chosen by MPWATCH_SCRIPTED_CUDA=<scenario.json> where there is no GPU
and no CUDA (tests, CI, the benches): the worker's CUDA view (worker.cuda's TorchCuda on a real
GPU) comes from here (`serve`, through the worker's GPU seam, worker.seam), beside the scripted
NVML (testing.nvml). Runs on the worker's sender thread, at most once a second, like the real
one. Standard library only.

Scenario: per rank (its MPWATCH_RANK, or "*" for any rank), frames whose "at" is seconds
since the worker imported mpwatch; the last frame whose time has passed is the view:
    {"ranks": {"0": [{"at": 0, "device": 0, "uuid": "GPU-fake-1",
                      "allocated": 1073741824, "reserved": 2147483648,
                      "max_allocated": 1073741824, "alloc_retries": 0, "num_ooms": 0,
                      "inactive_split": 0},
                     {"at": 2, "alloc_retries": 3}],    # keys not given keep their value
               "*": [...]}}
No frame yet (or no entry for the rank): no view, as when the script has not used CUDA.
A missing or broken scenario file is no view, never an error in the worker.

The scripted torch (testing.torch_cuda) allocates on top of the frames: what it holds and
the OOMs it raised are added to the view (`extra`), as torch's own counters would show them;
it reads the frames' allocator keys too (total, free, cache_block: see there).
"""
from __future__ import annotations

import json
import time

TYPE_CHECKING = False  # no `typing` at run time on the worker side: it costs milliseconds
if TYPE_CHECKING:
    from mpwatch.contract import CudaView
    from mpwatch.testing.torch_cuda import ScriptedTorch

_INTS = ("device", "allocated", "reserved", "max_allocated", "alloc_retries", "num_ooms", "inactive_split")


class ScriptedCuda:
    """Callable like worker.cuda's TorchCuda: the scripted view of this rank now, or None."""

    def __init__(self, path: str, rank: int):
        self.path = path
        self.t0 = time.monotonic()
        self.frames: list[dict[str, object]] = []
        # what the scripted torch allocated and raised on top of the frames (its thread writes,
        # the sender's reads: each a single int store)
        self.extra: dict[str, int] = {"allocated": 0, "reserved": 0, "num_ooms": 0}
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            ranks = data.get("ranks", {}) if isinstance(data, dict) else {}
            frames = ranks.get(str(rank), ranks.get("*", [])) if isinstance(ranks, dict) else []
            self.frames = [fr for fr in frames if isinstance(fr, dict)] if isinstance(frames, list) else []
        except (OSError, ValueError):
            pass

    def current(self) -> dict[str, object]:
        """The frames whose time has passed, merged (later keys win); {} before the first."""
        elapsed = time.monotonic() - self.t0
        merged: dict[str, object] = {}
        for fr in self.frames:
            at = fr.get("at", 0)
            if isinstance(at, (int, float)) and at <= elapsed:
                merged.update(fr)
        return merged

    def numbers(self, merged: dict[str, object]) -> dict[str, int]:
        """The frame's counters, the scripted torch's own added."""
        n = {k: int(v) if isinstance(v, (int, float)) else 0 for k, v in merged.items() if k in _INTS}
        for k, v in self.extra.items():
            n[k] = n.get(k, 0) + v
        if self.extra["allocated"]:
            n["max_allocated"] = max(n.get("max_allocated", 0), n.get("allocated", 0))
        return n

    def __call__(self) -> CudaView | None:
        merged = self.current()
        if not merged and not self.extra["reserved"]:
            return None
        n = self.numbers(merged)
        uuid = merged.get("uuid")
        return {"device": n.get("device", 0), "allocated": n.get("allocated", 0),
                "reserved": n.get("reserved", 0), "max_allocated": n.get("max_allocated", 0),
                "uuid": uuid if isinstance(uuid, str) else None,
                "alloc_retries": n.get("alloc_retries", 0), "num_ooms": n.get("num_ooms", 0),
                "inactive_split": n.get("inactive_split", 0)}


def serve(scenario: str, rank: int) -> tuple[ScriptedCuda, ScriptedTorch]:
    """The worker's GPU seam's double (worker.seam): the rank's view of `scenario`, and the
    process's scripted torch allocating on top of it (testing.torch_cuda)."""
    from mpwatch.testing import torch_cuda

    view = ScriptedCuda(scenario, rank)
    return view, torch_cuda.install(view)
