"""The flight recorder's word on a hang, joined to the finding (MPWATCH_NCCL_FLIGHT=1).

Once ranks stall, the ranks' dumps (rank-N/nccl_trace_rank_N, written by torch: NCCL's
watchdog or the debug pipe supervisor.diagnose.flight writes to) are read on a thread of its
own: by torch's own analyzer where torch ships it (torch.distributed.flight_recorder, the
torchfrtrace command: run as a subprocess of the workers' Python, never imported here), else
by supervisor.diagnose.flight's `not_joined`. Its "missing ranks" and collective join the
finding: "...; flight recorder: rank 1 did not join all_reduce #6", or name the culprit where
the stacks could not ("ranks 0,2 wait in all_reduce #6 for rank 1, which did not join it").
The thread never signals a process; `join` is pure.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from mpwatch.contract import Culprit, State, numtext, ranks_text
from mpwatch.supervisor import boundary
from mpwatch.supervisor.diagnose import flight

WAIT_S = 20.0  # how long the ranks' dumps may take to appear after the stall
ANALYZER_S = 120.0  # torch's analyzer imports torch: seconds, on a busy box more
MAX_DUMP = flight.MAX_DUMP
TEXT_MAX = 1 << 20  # characters of torch's analyzer's output read
MISSING_MAX = 1 << 16  # ranks a 'missing ranks' line may name


class Finding(NamedTuple):
    op: str  # the collective: all_reduce
    seq: int  # its sequence number in its process group
    missing: list[int]  # ranks that did not join it
    joined: list[int]
    by: str  # torch's analyzer | mpwatch


def dump_files(run_dir: Path, ranks: Collection[int]) -> dict[int, Path]:
    """The ranks' dumps that are there: regular files (never a link), not too big."""
    out: dict[int, Path] = {}
    for r in ranks:
        p = Path(run_dir) / f"rank-{r}" / f"{flight.TRACE_PREFIX}{r}"
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and 0 < st.st_size <= MAX_DUMP:
            out[r] = p
    return out


def torch_analyzer() -> bool:
    """torch ships its flight-recorder analyzer (found on disk: torch is never imported here)."""
    spec = importlib.util.find_spec("torch")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return any((Path(r) / "distributed" / "flight_recorder" / "fr_trace.py").is_file() for r in roots)


_BLOCK = re.compile(r"Not all ranks joining collective, sequence number: (" + numtext.INT + r")\b", re.ASCII)
_COLL = re.compile(r"^collective: (?:\w{1,64}:)?(\w{1,64})", re.ASCII)
_MISSING = re.compile(r"^missing ranks: \{([0-9, ]*)\}")


def parse_torch(text: str, ranks: Collection[int]) -> Finding | None:
    """The first 'Not all ranks joining collective' block of torch's analyzer: its sequence
    number, collective and missing ranks."""
    seq: int | None = None
    op: str | None = None
    for line in text[:TEXT_MAX].splitlines():
        line = line.strip()
        if (m := _BLOCK.search(line)) is not None:
            seq, op = int(m.group(1)), None
        elif seq is not None and (m := _COLL.match(line)) is not None:
            op = m.group(1)
        elif seq is not None and (m := _MISSING.match(line)) is not None:
            said = [numtext.int_of(x, 9) for x in m.group(1).replace(" ", "").split(",")[:MISSING_MAX] if x]
            missing = sorted({r for r in said if r is not None})
            if missing:
                return Finding(op or "a collective", seq, missing, sorted(set(ranks) - set(missing)),
                               "torch's analyzer")
    return None


def run_torch(files: Mapping[int, Path], python: str = sys.executable,
              timeout: float = ANALYZER_S) -> Finding | None:
    """torch's analyzer on copies of the dumps (in a directory of our own), or None when it
    fails (it needs every rank's dump, and some builds' dumps it cannot read)."""
    work = Path(tempfile.mkdtemp(prefix="mpwatch-flight-"))
    try:
        for r, p in files.items():
            shutil.copyfile(p, work / f"{flight.TRACE_PREFIX}{r}", follow_symlinks=False)
        res = subprocess.run([python, "-m", "torch.distributed.flight_recorder.fr_trace", str(work),
                              "-p", flight.TRACE_PREFIX], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return parse_torch(res.stdout + "\n" + res.stderr, files)


def read_own(files: Mapping[int, Path]) -> Finding | None:
    """mpwatch's own reading of the dumps (supervisor.diagnose.flight's not_joined)."""
    traces: dict[int, Any] = {r: flight.read_trace(p) for r, p in files.items()}
    groups = flight.not_joined({r: t for r, t in traces.items() if t is not None})
    if not groups:
        return None
    g = max(groups.values(), key=lambda g: (bool(g["missing"]), g["seq"]))
    if not g["missing"]:
        return None
    op = str(g["op"] or "a collective").split(":")[-1]
    return Finding(op, int(g["seq"]), list(g["missing"]), sorted(set(files) - set(g["missing"])), "mpwatch")


def analyze(files: Mapping[int, Path]) -> Finding | None:
    found = run_torch(files) if torch_analyzer() else None
    return found if found is not None else read_own(files)


def join(s: Culprit, f: Finding, rows: Sequence[Mapping[str, Any]]) -> Culprit:
    """The finding with the flight recorder's word: added to a culprit already named, or the
    culprit where the stacks could not tell (the ranks that did not join, while the ones
    that did are stalled)."""
    out = s.copy()
    said = f"{ranks_text(f.missing)} did not join {f.op} #{f.seq}"
    if s["culprits"] and s["text"]:
        out["text"] = f"{s['text']}; flight recorder: {said}"
        return out
    stalled = {w["rank"] for w in rows if w.get("state") == State.STALLED}
    waiting = [r for r in f.joined if r in stalled]
    if not waiting:
        return out
    which = "which did" if len(f.missing) == 1 else "which all did"
    out["culprits"], out["waiting"] = list(f.missing), waiting
    verb = "waits" if len(waiting) == 1 else "wait"
    out["text"] = (f"{ranks_text(waiting)} {verb} in {f.op} #{f.seq} for {ranks_text(f.missing)}, "
                   f"{which} not join it (flight recorder)")
    return out


class FlightJoin:
    """Reads the dumps once per hang (a thread of its own), for the stall watcher's finding."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._found: Finding | None = None
        self._hang = 0  # which hang the reading is of: a late answer to an old one is dropped

    def start(self, ranks: Collection[int]) -> None:
        """Once per hang: wait for the ranks' dumps, then read them."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, args=(sorted(ranks), self._hang),
                                            name="mpwatch-flight", daemon=True)
            self._thread.start()

    def _run(self, ranks: list[int], hang: int) -> None:
        with boundary.room("flight recorder"):  # the ranks' dumps, read behind the fault boundary
            self._read(ranks, hang)

    def _read(self, ranks: list[int], hang: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(dump_files(self.run_dir, ranks)) < len(ranks) and time.monotonic() < deadline:
            time.sleep(0.5)
        files = dump_files(self.run_dir, ranks)
        found = analyze(files) if len(files) >= 2 else None
        with self._lock:
            if hang == self._hang:
                self._found = found

    def result(self) -> Finding | None:
        with self._lock:
            return self._found

    def reset(self) -> None:
        """The hang is over: the next one is read afresh (an old thread's answer is dropped)."""
        with self._lock:
            self._thread, self._found = None, None
            self._hang += 1
