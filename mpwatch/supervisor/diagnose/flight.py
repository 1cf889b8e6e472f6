"""PyTorch's NCCL flight recorder, wired in behind a switch: MPWATCH_NCCL_FLIGHT=1
(settings.Settings.nccl_flight).

UNCHECKED on a real multi-GPU machine (NCCL refuses two ranks on one GPU, and none was
lent while this was written): the variable names and file layout below were read from
torch 2.14's own source and docs, and only the pure parts are tested.

With the switch on, each worker gets (unless the user set them already):
- TORCH_FR_BUFFER_SIZE (torch >= 2.7; older: TORCH_NCCL_TRACE_BUFFER_SIZE, still read,
  and the only name the dump pipe checks in some versions, so both are set): ring-buffer
  entries; > 0 turns the recorder on.
- TORCH_NCCL_DUMP_ON_TIMEOUT=1: dump when NCCL's watchdog sees a timeout.
- TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE: dump file prefix; the
  rank is appended -> rank-N/nccl_trace_rank_N (a pickle).
- TORCH_NCCL_DEBUG_INFO_PIPE_FILE: each rank creates the FIFO <prefix><rank>.pipe; a
  write to it asks for a dump on demand. mpwatch writes it on every stack dump.
- TORCH_NCCL_ASYNC_ERROR_HANDLING=3 (not torchrun's 1): 1 aborts a rank before its dump is
  written (pytorch#121055, PR #137375); torchtitan sets 3 whenever the recorder is on.
From the dumps, torch's own analyzer (torch.distributed.flight_recorder, the torchfrtrace
command), else `not_joined`, names the ranks that did not join the last collective
(supervisor.diagnose.flight_join joins that to the hang finding).
"""
from __future__ import annotations

import io
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BUFFER = "2000"
TRACE_PREFIX = "nccl_trace_rank_"
PIPE_PREFIX = "nccl_pipe_"


def async_error_handling(on: bool) -> str:
    """TORCH_NCCL_ASYNC_ERROR_HANDLING for the workers (unless the user set it): 3 with the
    recorder on (its dumps survive an abort), else torchrun's 1."""
    return "3" if on else "1"


def worker_vars(rank_dir: Path) -> dict[str, str]:
    trace = str(Path(rank_dir) / TRACE_PREFIX)
    return {
        "TORCH_FR_BUFFER_SIZE": BUFFER,
        "TORCH_NCCL_TRACE_BUFFER_SIZE": BUFFER,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": trace,
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": trace,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(Path(rank_dir) / PIPE_PREFIX),
    }


def apply(env: dict[str, str], rank_dir: Path) -> dict[str, str]:
    """The worker's env with the recorder's variables added (the user's own values win)."""
    for k, v in worker_vars(rank_dir).items():
        env.setdefault(k, v)
    return env


def trigger(rank_dir: Path, rank: int) -> str | None:
    """Ask one rank for a dump through its FIFO; None when asked, else why not."""
    pipe = Path(rank_dir) / f"{PIPE_PREFIX}{rank}.pipe"
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when nobody reads it
    except FileNotFoundError:
        return f"no flight-recorder pipe {pipe.name} (not an NCCL process group yet?)"
    except OSError as exc:
        return f"flight-recorder pipe {pipe.name}: {exc.strerror}"
    try:
        os.write(fd, b"1")
    except OSError as exc:
        return f"flight-recorder pipe {pipe.name}: {exc.strerror}"
    finally:
        os.close(fd)
    return None


class _PlainUnpickler(pickle.Unpickler):
    # The dump is plain containers, numbers and strings: refuse anything that names a class.
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name} in a flight-recorder dump")


def read_trace(path: Path) -> dict[str, Any] | None:
    try:
        data = Path(path).read_bytes()
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError):
        return None
    return obj if isinstance(obj, dict) else None


def not_joined(traces: Mapping[int, Any]) -> dict[str, dict[str, Any]] | None:
    """traces: {rank: dump dict with "entries": [{collective_seq_id, profiling_name, pg_id}]}.
    Per process group, the last collective any rank entered, and the ranks that never
    entered it. Pure. None when no rank recorded a collective."""
    last: dict[str, dict[int, tuple[int, Any]]] = {}  # pg -> {rank: (seq, name)}
    for rank, dump in traces.items():
        for e in (dump or {}).get("entries") or []:
            seq = e.get("collective_seq_id")
            if not isinstance(seq, int) or seq <= 0:
                continue
            pg = str(e.get("pg_id", e.get("process_group", ("0",))[0] if e.get("process_group") else "0"))
            cur = last.setdefault(pg, {}).get(rank)
            if cur is None or seq > cur[0]:
                last[pg][rank] = (seq, e.get("profiling_name"))
    if not last:
        return None
    groups = {}
    for pg, per_rank in last.items():
        top = max(s for s, _ in per_rank.values())
        name = next(n for s, n in per_rank.values() if s == top)
        missing = sorted(r for r in traces if per_rank.get(r, (0, None))[0] < top)
        groups[pg] = {"seq": top, "op": name, "missing": missing}
    return groups
