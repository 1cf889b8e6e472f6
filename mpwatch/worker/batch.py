"""One batch frame, shaped from the reports a flush drains: the entries whose loss is there,
a long run of them folded into FOLD, torch.distributed's and the allocator's state read, the
CUDA OOMs seen since the last one (worker.cuda_memory).

Runs on the worker's sender thread (worker.sender's `Sender.flush`), loaded on its first
flush, never at `import mpwatch`. Standard library only: torch is read when the script already
imported it (mpwatch.worker.cuda), never imported here.
"""
from __future__ import annotations

import sys
import time
from collections import deque

from mpwatch.contract import protocol
from mpwatch.worker import bounds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mpwatch.contract import CudaView, OomRecord
    from mpwatch.worker.channel import Channel, Entry, ProcessState

CUDA_EVERY_S = 1.0  # torch's memory view is sampled at most this often
# Entries per batch: a flush holding more reports folds runs of consecutive ones into one
# entry (last step, last loss, metrics merged, and their count), so the supervisor's cost
# per worker stays flat however fast a loop reports; 8 points a flush still draw the curve.
FOLD = 8


def drain(buf: deque[Entry]) -> list[Entry]:
    """The buffer's entries up to the first whose loss is not there yet (an automatic step
    whose loss the GPU has not written: it goes at a later flush, with what follows it)."""
    items: list[Entry] = []
    while buf:
        try:
            if not ready(buf[0][3]):
                break
            items.append(buf.popleft())
        except IndexError:
            break
    return items


def with_gpu_times(s: ProcessState, items: list[Entry], own: dict[str, float]) -> dict[str, float]:
    """The process's phase totals: the training thread's (`own`), and the GPU times of the
    automatic steps drained now (worker.auto.gpu_times: read here, once their events completed)."""
    if not s.phase_cache:  # the script times its own phases: none of the automatic steps'
        gpu = s.gpu_phases
        for item in items:
            read = getattr(item[3], "gpu_phases", None)
            got = read() if read is not None else None
            for name, secs in (got or {}).items():
                gpu[name] = gpu.get(name, 0.0) + secs
    phases = dict(own)
    for name, secs in s.gpu_phases.items():
        phases[name] = phases.get(name, 0.0) + secs
    return phases


def frame(chan: Channel, items: list[Entry], dropped: int, phases: dict[str, float],
          live: object, ooms: list[OomRecord] | None = None) -> dict[str, object]:
    """The batch message of these entries, bounded (mpwatch.worker.bounds)."""
    reports: list[list[object]]
    if len(items) <= FOLD:
        reports = [[ts, step, as_number(loss), metrics] for _, ts, step, loss, metrics in items]
    else:
        reports = fold(items)
    msg: dict[str, object] = {"t": protocol.BATCH, "reports": bounds.reports(reports), "dropped": dropped,
                              "phases": bounds.phases(phases)}
    if dist_initialized():
        msg["dist"] = True
    cuda = cuda_view(chan)
    if cuda:
        msg["cuda"] = cuda
    if live:
        msg["live"] = live
    if ooms:
        msg["oom"] = ooms
    s = chan.state
    if s.auto and items and (s.explicit < 0 or items[-1][0] < s.explicit):
        msg["auto"] = True  # every report of the batch is an automatic step
    return msg


def cuda_view(chan: Channel) -> CudaView | None:
    """The allocator's counters, at most once every CUDA_EVERY_S."""
    now = time.monotonic()
    s = chan.state
    if now < s.next_cuda:
        return None
    s.next_cuda = now + CUDA_EVERY_S
    with s.imports:  # torch's calls may import too: never while this process forks
        if chan.cuda_source is None:
            if "torch" not in sys.modules:
                return None
            from mpwatch.worker.cuda import TorchCuda  # only in processes that use torch

            chan.cuda_source = TorchCuda()
        return chan.cuda_source()


def dist_initialized() -> bool:
    """torch.distributed has a default process group in this process. Never imports torch: a
    script that did not import torch.distributed has none."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return False
    try:
        return bool(dist.is_initialized())
    except Exception:  # noqa: BLE001 - half imported, or torch built without distributed: no group
        return False


def ready(loss: object) -> bool:
    ready = getattr(loss, "ready", None)  # mpwatch.worker.auto.loss.StepLoss
    return ready is None or bool(ready())


def as_number(loss: object) -> float | int | None:
    if loss is None or type(loss) is float or type(loss) is int:
        return loss
    try:
        return float(loss)  # type: ignore[arg-type]  # a 0-d tensor or numpy scalar: float() is its protocol
    except (TypeError, ValueError, RuntimeError):
        return None


def fold(items: list[Entry]) -> list[list[object]]:
    """FOLD entries for a long run of reports: consecutive reports in near-equal groups, each
    group the last timestamp, the last step and loss given, the merged metrics, its size."""
    out: list[list[object]] = []
    n = len(items)
    for g in range(FOLD):
        group = items[g * n // FOLD:(g + 1) * n // FOLD]
        step: int | None = None
        loss: object = None
        metrics: dict[str, object] = {}
        for _, _, s, lo, m in group:
            if s is not None:
                step = s
            if lo is not None:
                loss = lo
            if m:
                metrics.update(m)
        out.append([group[-1][1], step, as_number(loss), metrics, len(group)])
    return out
