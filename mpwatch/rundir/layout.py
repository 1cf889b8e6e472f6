"""The run directory's layout: every name a run writes, and where a run's directory goes by
default, spelled here once. rundir.writer creates these files (no other module does);
rundir.reader and the others only read them. Pure names and paths; no I/O.

    <cwd>/<RUNS_FOLDER>/<run id>/  (unless --run-dir says otherwise; 0700; every file 0600)
    (a run id is <time>-<script>-<random suffix>: rundir.registry.new_run_id)
        run.json               command, options, start time; finish time and exit code at the end
        events.jsonl           one JSON object a line: ts, event, rank, fields of its own
        control.json           how to reach the control socket (0600: it holds the authkey)
        final.json             the last status snapshot, written when the run ends
        gpu.jsonl              the GPU timeline (supervisor.gpu.timeline): ticks, marks, notes
        supervisor.log         the supervisor's own output when the TUI started it
        rank-N/stdout.log      every byte the worker (and its children) wrote
        rank-N/stderr.log
        rank-N/faulthandler.out  where the worker's faulthandler writes on SIGUSR1
        rank-N/stacks/<time>.txt  stack dumps, one file each
        rank-N/profiles/<time>-<request id>.json.gz  a profile's Chrome trace (torch.profiler),
                               written by the rank's own process (rundir.rank_files)
        rank-N/profiles/<time>-<request id>.svg  a py-spy flame graph (a rank without torch)
        rank-N/memory/<kind>-<time>-<pid>-<n>.pickle  torch's allocator snapshots (pytorch.org/memory_viz
                               opens them): an OOM's (--cuda-memory-history) and those asked for;
                               written by the rank's own process (rundir.rank_files)
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

RUNS_FOLDER = "mpwatch-runs"  # where a run's directory goes, relative to its cwd
RUN_JSON = "run.json"
EVENTS = "events.jsonl"
CONTROL_JSON = "control.json"
FINAL_JSON = "final.json"
GPU_JSONL = "gpu.jsonl"
SUPERVISOR_LOG = "supervisor.log"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
STACK_FILE = "faulthandler.out"
STACKS = "stacks"
STACK_SUFFIX = ".txt"
PROFILES = "profiles"
TRACE_SUFFIX = ".json.gz"  # Perfetto and chrome://tracing open it as it is
FLAME_SUFFIX = ".svg"
# room on the disk kept from the start for the run's last files (final.json, run.json's end), given
# back as the run ends: a disk that filled meanwhile still takes them (rundir.writer)
RESERVE = ".final-reserve"
PART_SUFFIX = ".part"  # a file being written; renamed to its name once whole
MEMORY = "memory"  # a rank's allocator snapshots (written by rundir.rank_files)
SNAPSHOT_SUFFIX = ".pickle"
LOG_MARK = "--- mpwatch: "  # begins the line the supervisor writes in a rank's logs before each restart
LOG_MARK_END = " ---"  # ends it: such a line is mpwatch's own, never a cause

# The files of the run as a whole, in the order a listing of what is left shows them.
RUN_FILES = (RUN_JSON, EVENTS, FINAL_JSON, GPU_JSONL, SUPERVISOR_LOG)
# A directory holding any of these (written first or last) is a run directory.
MARKERS = (RUN_JSON, EVENTS, FINAL_JSON)
# a rank's folder: its number as the writer spells it (ASCII, no leading zero: "rank-٣", "rank-03" are none)
RANK_DIR = re.compile(r"^rank-(0|[1-9][0-9]{0,8})$")
STREAMS = {"stdout": STDOUT_LOG, "stderr": STDERR_LOG}


def action_stem(stamp: float, rid: int) -> str:
    """A rank's action file's name, less its suffix: the request's time and id (every rank
    asked gets the same one, in its own folder)."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(stamp)) + f"-{rid}"


def rank_dir(run_dir: Path | str, rank: int) -> Path:
    return Path(run_dir) / f"rank-{rank}"


def log_path(run_dir: Path | str, rank: int, stream: str) -> Path:
    """A rank's log: stream "stdout" or "stderr" (anything else is a ValueError)."""
    try:
        return rank_dir(run_dir, rank) / STREAMS[stream]
    except KeyError:
        raise ValueError(f"no log stream {stream!r} (stdout or stderr)") from None


@dataclass(frozen=True)
class RankPaths:
    dir: Path  # rank-N/
    stdout: Path
    stderr: Path
    stack_file: Path  # where the worker's faulthandler writes
    stacks: Path  # the dumps, one file each


def rank_paths(run_dir: Path | str, rank: int) -> RankPaths:
    d = rank_dir(run_dir, rank)
    return RankPaths(d, d / STDOUT_LOG, d / STDERR_LOG, d / STACK_FILE, d / STACKS)
