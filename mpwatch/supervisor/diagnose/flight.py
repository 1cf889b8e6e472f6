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

from mpwatch.rundir.textfiles import open_regular

BUFFER = "2000"
MAX_DUMP = 64 << 20  # a dump bigger than this is not read
ENTRIES_MAX = 20_000  # a dump's last entries read (torch keeps BUFFER)
NAME_MAX = 200  # characters of a collective's or a group's name kept
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


def read_trace(path: Path, limit: int = MAX_DUMP) -> dict[str, Any] | None:
    """A rank's dump: a regular file (never through a link) of at most `limit` bytes holding
    plain containers; None for anything else."""
    try:
        with open_regular(path) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            return None
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception:  # noqa: BLE001 - a damaged pickle raises what its bytes make it (ValueError, KeyError, ...)
        return None
    return obj if isinstance(obj, dict) else None


def _seq(e: dict[Any, Any]) -> int | None:
    seq = e.get("collective_seq_id")
    return seq if type(seq) is int and 0 < seq < 1 << 62 else None


def _group(e: dict[Any, Any]) -> str:
    """An entry's process group as text: its pg_id, else its process_group's first item, else "0"."""
    pg = e.get("pg_id")
    if pg is None:
        grp = e.get("process_group")
        pg = grp[0] if isinstance(grp, (list, tuple)) and grp else "0"
    if type(pg) is int and abs(pg) < 1 << 62:
        return str(pg)
    return pg[:NAME_MAX] if isinstance(pg, str) else "?"


def _entries(dump: object) -> list[dict[Any, Any]]:
    """A dump's last ENTRIES_MAX entries that are dicts (a damaged dump gives fewer, or none)."""
    raw = dump.get("entries") if isinstance(dump, dict) else None
    return [e for e in raw[-ENTRIES_MAX:] if isinstance(e, dict)] if isinstance(raw, list) else []


def not_joined(traces: Mapping[int, Any]) -> dict[str, dict[str, Any]] | None:
    """traces: {rank: dump dict with "entries": [{collective_seq_id, profiling_name, pg_id}]}.
    Per process group, the last collective any rank entered, and the ranks that never
    entered it. Pure and total: an entry of the wrong shape is skipped. None when no rank
    recorded a collective."""
    last: dict[str, dict[int, tuple[int, str | None]]] = {}  # pg -> {rank: (seq, name)}
    for rank, dump in traces.items():
        for e in _entries(dump):
            seq = _seq(e)
            if seq is None:
                continue
            pg = _group(e)
            cur = last.setdefault(pg, {}).get(rank)
            if cur is None or seq > cur[0]:
                name = e.get("profiling_name")
                last[pg][rank] = (seq, name[:NAME_MAX] if isinstance(name, str) else None)
    if not last:
        return None
    groups = {}
    for pg, per_rank in last.items():
        top = max(s for s, _ in per_rank.values())
        name = next(n for s, n in per_rank.values() if s == top)
        missing = sorted(r for r in traces if per_rank.get(r, (0, None))[0] < top)
        groups[pg] = {"seq": top, "op": name, "missing": missing}
    return groups
