"""The scripted torch's allocator snapshot (testing.torch_cuda's `torch.cuda.memory._snapshot()`),
in the format torch.cuda.memory._snapshot() returns and pytorch.org/memory_viz reads: segments (one
cudaMalloc each) of blocks (active_allocated or inactive), each block with the frames that
allocated it when the history records them, and device_traces (one list per device) of the
allocator's actions. torch.cuda._memory_viz's own readers (segsum, trace) accept it.

The scenario's memory (allocated, reserved) is one segment; its free bytes are cut into blocks
no larger than the cache's largest free block, each between two allocated ones (free blocks
side by side would be one), which is what fragmentation looks like. Each allocation the scripted
torch made itself is a segment of its own. Pure; standard library only.
"""
from __future__ import annotations

BASE = 0x7F0000000000  # the first segment's address
GAP = 1 << 32  # between two segments' addresses
PIECES_MAX = 256  # free blocks of the scenario's segment at most


class Segment:
    """A segment the scripted torch allocated itself: one active block."""

    __slots__ = ("address", "frames", "requested", "size")

    def __init__(self, address: int, size: int, requested: int, frames: list[dict[str, object]]):
        self.address = address
        self.size = size
        self.requested = requested
        self.frames = frames


def next_address(segments: list[Segment]) -> int:
    return BASE + GAP * (len(segments) + 1)


def _pieces(allocated: int, cached: int, largest: int) -> list[tuple[int, str]]:
    """(size, state) of the scenario's segment, in address order."""
    if cached <= 0:
        return [(allocated, "active_allocated")] if allocated > 0 else []
    largest = max(min(largest, cached), -(-cached // PIECES_MAX), 1)
    frees = [largest] * (cached // largest) + ([cached % largest] if cached % largest else [])
    k = len(frees)
    actives = [allocated * (i + 1) // k - allocated * i // k for i in range(k)]
    out: list[tuple[int, str]] = []
    for f, a in zip(frees, actives, strict=True):
        out.append((f, "inactive"))
        if a > 0:
            out.append((a, "active_allocated"))
    return out


def _segment(device: int, address: int, blocks: list[dict[str, object]]) -> dict[str, object]:
    total = sum(int(b["size"]) for b in blocks)  # type: ignore[call-overload]  # ints, made here
    active = sum(int(b["size"]) for b in blocks if b["state"] == "active_allocated")  # type: ignore[call-overload]
    return {"device": device, "address": address, "total_size": total, "allocated_size": active,
            "active_size": active, "requested_size": active, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}


def base_segment(device: int, allocated: int, reserved: int, largest: int,
                 origin: str | None) -> dict[str, object] | None:
    """The scenario's memory as one segment (None when it reserves nothing); `origin`: the
    scenario's path, named as the frame of its allocated blocks (None: no frames recorded)."""
    if reserved <= 0:
        return None
    frames = [{"filename": origin, "line": 0, "name": "the scenario's allocations"}] if origin else []
    blocks: list[dict[str, object]] = []
    addr = BASE
    for size, state in _pieces(max(allocated, 0), reserved - max(allocated, 0), largest):
        active = state == "active_allocated"
        blocks.append({"address": addr, "size": size, "requested_size": size if active else 0, "state": state,
                       "frames": frames if active else []})
        addr += size
    return _segment(device, BASE, blocks)


def snapshot(device: int, base: dict[str, object] | None, own: list[Segment],
             trace: list[dict[str, object]]) -> dict[str, object]:
    segments = [base] if base is not None else []
    for s in own:
        block = {"address": s.address, "size": s.size, "requested_size": s.requested,
                 "state": "active_allocated", "frames": s.frames}
        segments.append(_segment(device, s.address, [block]))
    traces: list[list[dict[str, object]]] = [[] for _ in range(device + 1)]
    traces[device] = trace
    return {"segments": segments, "device_traces": traces}
