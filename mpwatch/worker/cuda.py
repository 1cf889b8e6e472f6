"""The worker's CUDA view: torch's caching-allocator counters of the device this process
allocates on, read on the worker's sender thread at most once a second (mpwatch.worker.batch), only
when the script already initialised CUDA. Standard library only: torch is found in
sys.modules, never imported, and CUDA is never initialised here.
"""
from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # `typing` costs milliseconds at `import mpwatch`; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from mpwatch.contract import CudaView

CUDA_RESCAN_S = 10.0  # which device the process allocates on is re-checked this often


def _stat(stats: object, *path: str) -> int:
    """A counter of memory_stats_as_nested_dict(): 0 where the allocator has none yet."""
    for key in path:
        stats = stats.get(key) if isinstance(stats, dict) else None
    return int(stats) if isinstance(stats, int) else 0


class TorchCuda:
    """torch's caching-allocator counters of the device this process allocates on, only
    when the script already initialised CUDA (this never initialises it). Sender thread.

    One memory_stats_as_nested_dict() call gives every counter (memory_reserved() and
    friends each build and flatten the whole dict). The device is the one holding the most
    reserved memory, re-checked every CUDA_RESCAN_S: the current device is per thread (this
    is the sender thread) and LOCAL_RANK is wrong exactly when a script picks a wrong
    device. The UUID, spelled as NVML does ("GPU-…", "MIG-…"), lets the supervisor find
    NVML's index whatever CUDA_VISIBLE_DEVICES does to torch's numbering."""

    def __init__(self) -> None:
        self.device: int | None = None
        self.rescan_at = 0.0
        self.uuids: dict[int, str | None] = {}

    def __call__(self) -> CudaView | None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        try:
            cuda = torch.cuda
            if not cuda.is_initialized():  # never initialise CUDA ourselves
                return None
            stats_of = cuda.memory_stats_as_nested_dict
            now = time.monotonic()
            if self.device is None or now >= self.rescan_at:
                self.rescan_at = now + CUDA_RESCAN_S
                self.device = self._busiest(cuda, stats_of)
            dev = self.device
            s = stats_of(dev)
            return {
                "device": dev,
                "allocated": _stat(s, "allocated_bytes", "all", "current"),
                "reserved": _stat(s, "reserved_bytes", "all", "current"),
                "max_allocated": _stat(s, "allocated_bytes", "all", "peak"),
                "uuid": self.uuid_of(cuda, dev),
                "alloc_retries": _stat(s, "num_alloc_retries"),
                "num_ooms": _stat(s, "num_ooms"),
                "inactive_split": _stat(s, "inactive_split_bytes", "all", "current"),
            }
        except Exception:  # noqa: BLE001 - never raise into training
            return None

    @staticmethod
    def _busiest(cuda: ModuleType, stats_of: Callable[[int], object]) -> int:
        n = max(int(cuda.device_count()), 1)
        reserved = [_stat(stats_of(d), "reserved_bytes", "all", "current") for d in range(n)]
        dev = max(range(n), key=reserved.__getitem__)
        if not reserved[dev]:
            dev = int(os.environ.get("LOCAL_RANK", "0")) % n
        return dev

    def uuid_of(self, cuda: ModuleType, dev: int) -> str | None:
        """The device's UUID as NVML spells it, asked of torch once."""
        if dev in self.uuids:
            return self.uuids[dev]
        uuid = None
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
        if dev < len(visible) and visible[dev].startswith("MIG-"):
            uuid = visible[dev]  # a MIG instance: torch's own UUID may be its parent GPU's
        else:
            raw = getattr(cuda.get_device_properties(dev), "uuid", None)  # cached by torch
            if raw is not None:
                text = str(raw)
                uuid = text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
        self.uuids[dev] = uuid
        return uuid
