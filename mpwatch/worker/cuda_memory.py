"""CUDA memory forensics in a rank's process: torch's OOM observer, the allocation history
(--cuda-memory-history) and the allocator snapshots the rank writes into its folder.

Armed right after `import torch` by the start-up hook (worker.boot, the finder of the automatic
steps), or on the GPU seam's torch (worker.seam) where a test sets the seam, and only in a
process that initialises CUDA: `arm` hands its work to torch.cuda._lazy_call, which torch
runs once its CUDA state is initialised, never before (a CPU-only process, a DataLoader worker
pays nothing). Then, with the calls and arguments torch documents:
- with the history on, torch.cuda.memory._record_memory_history(...) records the Python stack
  of each allocation from then on, so that a snapshot says who allocated each block;
- torch._C._cuda_attach_out_of_memory_observer(observer): torch calls the observer on the
  allocating thread when an allocation fails, before it raises OutOfMemoryError, whether or not
  the script catches it. The observer reads the allocator's counters, writes the snapshot (with
  the history on) and queues one OomRecord (contract.cuda_view) for the sender's next batch;
- sys.excepthook and threading.excepthook are chained: an OutOfMemoryError that reaches the top
  adds its message to that record (the process's last flush, at its exit, sends it).

Threads: arm on the thread that imported torch; on_cuda on the one that initialised CUDA; the
observer on the one that allocated; the hooks on the one that died. Nothing here raises into the
script. Standard library only.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from mpwatch.contract import protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any

    from mpwatch.contract import OomRecord
    from mpwatch.worker.channel import Channel

STACKS = "python"  # the history's frames: Python's (C++ frames cost far more to unwind)
HISTORY_MAX = 10_000_000  # entries: a value past this in the environment is not the supervisor's
OOM_SNAPSHOTS_MAX = 4  # snapshots a process writes at OOMs (a script may catch OOMs in a loop)
ERROR_MAX = 300  # characters of why something was not done
SAME_OOM_S = 30.0  # an OutOfMemoryError raised this soon after the observer saw an OOM is that OOM's
SUFFIX = ".pickle"  # rundir.layout's SNAPSHOT_SUFFIX (the worker side does not load layout)
SNAPSHOT_MAX = 2 << 30  # bytes of a pickled snapshot: past them none is kept (memory_viz reads far less)

_armed: Forensics | None = None


def _entries(raw: str | None) -> int:
    try:
        n = int(raw or "0")
    except ValueError:
        return 0
    return n if 0 < n <= HISTORY_MAX else 0


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_MAX]


def arm(torch: Any, chan: Channel | None) -> Forensics | None:
    """Queue the forensics for torch's CUDA initialisation, once a process. None outside
    mpwatch, or when the run asked for none (the supervisor sets protocol.ENV_CUDA_OOM)."""
    global _armed
    if _armed is not None or chan is None:
        return _armed
    env = os.environ
    history = _entries(env.get(protocol.ENV_CUDA_HISTORY))
    if env.get(protocol.ENV_CUDA_OOM) != "1" and not history:
        return None
    f = _armed = Forensics(torch, chan, history, env.get(protocol.ENV_MEMORY_DIR) or None)
    torch.cuda._lazy_call(f.on_cuda)
    return f


def armed() -> Forensics | None:
    """This process's forensics, once armed."""
    return _armed


class Forensics:
    """What one process does about its CUDA memory."""

    def __init__(self, torch: Any, chan: Channel, history: int, folder: str | None):
        self.torch = torch
        self.chan = chan
        self.history = history  # entries torch keeps; 0: no history
        self.folder = folder  # rank-N/memory/ (rundir.rank_files writes there); None: nowhere to write
        self.cuda = False  # the process initialised CUDA
        self.recording = False  # torch records the history
        self.history_error: str | None = None
        self.lock = threading.Lock()
        self.seq = 0  # OOMs seen
        self.written = 0  # snapshots written
        self.at_ooms = 0  # of them at OOMs
        self.last: OomRecord | None = None
        self.uuids: dict[int, str | None] = {}

    # ------------------------------------------------------------- arming ----
    def on_cuda(self) -> None:
        """torch initialised CUDA in this process (its lazy init calls this)."""
        try:
            self.cuda = True
            torch = self.torch
            if self.history:
                try:
                    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=STACKS,
                                                             max_entries=self.history)
                    self.recording = True
                except Exception as exc:  # noqa: BLE001 - an older torch: said in the OOM finding
                    self.history_error = _why(exc)
            attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
            if callable(attach):
                attach(self.observe)
            self._chain_hooks()
        except Exception as exc:  # noqa: BLE001 - never fail torch's CUDA initialisation
            sys.stderr.write(f"mpwatch: no CUDA memory forensics in this process: {_why(exc)}\n")

    def _chain_hooks(self) -> None:
        before, before_thread = sys.excepthook, threading.excepthook

        def excepthook(tp: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            self.raised(value)
            before(tp, value, tb)

        def thread_hook(args: threading.ExceptHookArgs) -> None:
            if args.exc_value is not None:
                self.raised(args.exc_value)
            before_thread(args)

        sys.excepthook, threading.excepthook = excepthook, thread_hook

    # ----------------------------------------------------------- the OOM ----
    def observe(self, device: int, alloc: int, total: int, free: int) -> None:
        """torch's OOM observer: (device, bytes asked, device total, device free)."""
        try:
            self._observed(int(device), int(alloc), int(total), int(free))
        except Exception:  # noqa: BLE001 - torch is about to raise its own error: never one of ours
            pass

    def _observed(self, device: int, alloc: int, total: int, free: int) -> None:
        with self.lock:
            self.seq += 1
            seq = self.seq
        stats = self.torch.cuda.memory_stats(device)

        def stat(key: str) -> int | None:
            v = stats.get(key) if isinstance(stats, dict) else None
            return v if type(v) is int else None

        rec: OomRecord = {"seq": seq, "ts": time.time(), "device": device, "uuid": self._uuid(device),
                          "alloc": alloc, "total": total, "free": free,
                          "allocated": stat("allocated_bytes.all.current"),
                          "reserved": stat("reserved_bytes.all.current"),
                          "inactive_split": stat("inactive_split_bytes.all.current"),
                          "snapshot": None, "snapshot_error": self.history_error, "message": None}
        if self.recording:
            if self.at_ooms < OOM_SNAPSHOTS_MAX:
                self.at_ooms += 1
                rec["snapshot"], rec["snapshot_error"] = self.write("oom")
            else:
                rec["snapshot_error"] = f"not written: {OOM_SNAPSHOTS_MAX} snapshots at OOMs already"
        self.last = rec
        self._queue(rec)

    def raised(self, exc: BaseException) -> None:
        """An exception reached the top of a thread: an OutOfMemoryError's message completes the
        record of its OOM (or is one, where no observer saw it: an older torch, cudaMalloc's
        "CUDA error: out of memory" outside the caching allocator)."""
        try:
            text = str(exc)
            oom_type = getattr(self.torch.cuda, "OutOfMemoryError", None)
            is_oom = isinstance(oom_type, type) and isinstance(exc, oom_type)
            if not is_oom and "out of memory" not in text.lower():
                return
            now = time.time()
            with self.lock:
                last = self.last
                same = last is not None and last["message"] is None and now - last["ts"] < SAME_OOM_S
                if not same:
                    self.seq += 1
                seq = last["seq"] if same and last is not None else self.seq
            rec: OomRecord = {"seq": seq, "ts": now, "device": None, "uuid": None, "alloc": None,
                              "total": None, "free": None, "allocated": None, "reserved": None,
                              "inactive_split": None, "snapshot": None, "snapshot_error": None,
                              "message": f"{type(exc).__name__}: {text}"[:protocol.OOM_MESSAGE_MAX]}
            if same and last is not None:
                last["message"] = rec["message"]
            else:
                self.last = rec
            self._queue(rec)
        except Exception:  # noqa: BLE001 - the script's own error is what is printed next
            pass

    def _queue(self, rec: OomRecord) -> None:
        self.chan.state.ooms.append(rec)
        self.chan.start()

    def _uuid(self, device: int) -> str | None:
        if device not in self.uuids:
            from mpwatch.worker.cuda import TorchCuda  # stdlib: its UUID rule, spelled as NVML's

            self.uuids[device] = TorchCuda().uuid_of(self.torch.cuda, device)
        return self.uuids[device]

    # ---------------------------------------------------------- snapshots ----
    def write(self, kind: str) -> tuple[str | None, str | None]:
        """torch.cuda.memory._snapshot() pickled into the rank's folder, under a name of its own
        (an OOM's): (path, None), or (None, why not)."""
        if self.folder is None:
            return None, "no folder for snapshots (an mpwatch older than this rank's)"
        from mpwatch.rundir.rank_files import own_name  # stdlib, loaded at the first snapshot

        self.written += 1
        path, _, error = self.write_to(os.path.join(self.folder, own_name(kind, os.getpid(), self.written,
                                                                          SUFFIX)))
        return path, error

    def write_to(self, path: str) -> tuple[str | None, int, str | None]:
        """torch.cuda.memory._snapshot() pickled to `path` (a new file of the rank's folder: the
        supervisor's name for an asked one), by the writer of a rank's files (rundir.rank_files):
        (path, its size, None), or (None, 0, why not)."""
        try:
            import pickle

            from mpwatch.rundir.rank_files import RankFolder

            with RankFolder(path) as folder:
                snap = self.torch.cuda.memory._snapshot()
                size = folder.write(lambda f: pickle.dump(snap, f), SNAPSHOT_MAX)
            return path, size, None
        except Exception as exc:  # noqa: BLE001 - a full disk, a planted link: said, never raised
            return None, 0, _why(exc)
