"""Reading faulthandler stack dumps: which frame is the user's own code, where a thread
waits, which collective it is in. Pure text functions, shared by the supervisor (which
summarises each dump) and the TUI (which highlights the user's frame)."""
from __future__ import annotations

import os
import re
import sysconfig
from pathlib import Path

HEADER = "=== mpwatch stack dump: pid "  # the line the supervisor writes before each process
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')

COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
    "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "send", "recv", "wait",
    "_wait", "batch_isend_irecv", "new_group", "init_process_group", "rendezvous", "_store_based_barrier",
}


def parse(text: str) -> list[dict]:
    """faulthandler dumps -> [{pid, threads: [{id, current, frames: [(file, line, func)]}]}],
    innermost frame first. Lines that are neither headers nor frames are skipped."""
    procs: list[dict] = []
    cur = None
    thread = None
    for line in text.splitlines():
        if line.startswith(HEADER):
            try:
                pid = int(line[len(HEADER):].split()[0])
            except (ValueError, IndexError):
                pid = None
            cur = {"pid": pid, "threads": []}
            procs.append(cur)
            thread = None
            continue
        m = _THREAD.match(line)
        if m:
            if cur is None:
                cur = {"pid": None, "threads": []}
                procs.append(cur)
            thread = {"id": m.group(2), "current": m.group(1) == "Current thread", "frames": []}
            cur["threads"].append(thread)
            continue
        m = _FRAME.match(line)
        if m and thread is not None:
            thread["frames"].append((m.group("file"), int(m.group("line")), m.group("func")))
    return procs


def main_thread(proc: dict) -> dict | None:
    """The thread that ran the handler is the main thread (the kernel delivers a
    process-directed signal to it first); failing that, the oldest thread, listed last."""
    threads = proc.get("threads") or []
    cur = [t for t in threads if t["current"]]
    return cur[0] if cur else (threads[-1] if threads else None)


_LIBRARY_DIRS = tuple({p for p in (sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib",
                                                                           "purelib", "platlib")) if p})
_MPWATCH_DIR = str(Path(__file__).resolve().parent)


def is_user_file(path: str) -> bool:
    """A frame of the user's own code: not the standard library, not an installed
    package, not mpwatch, not a frozen module."""
    if not path or path.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path or "/lib/python3" in path:
        return False
    if path.startswith(_LIBRARY_DIRS) or path.startswith(_MPWATCH_DIR):
        return False
    return True


def fmt_frame(frame) -> str:
    file, line, func = frame
    return f"{func} ({os.path.basename(file)}:{line})"


def collective_frame(frames) -> tuple | None:
    """The torch.distributed call a thread waits in, if any (innermost first)."""
    for f in frames:
        if ("torch/distributed" in f[0] or "torch\\distributed" in f[0]) and f[2] in COLLECTIVES:
            return f
    return None


def summarize(text: str, pid: int | None = None) -> dict:
    """Where the main thread of `pid` (default: the first process) is stuck:
    {where: innermost user frame, innermost: innermost Python frame, collective: name or
    None, threads: n}; empty when the dump has no such process."""
    procs = parse(text)
    proc = next((p for p in procs if pid is None or p["pid"] == pid), None)
    if proc is None:
        return {}
    t = main_thread(proc)
    if t is None or not t["frames"]:
        return {"threads": len(proc["threads"])}
    frames = t["frames"]
    user = next((f for f in frames if is_user_file(f[0])), None)
    coll = collective_frame(frames)
    return {"where": fmt_frame(user) if user else None, "innermost": fmt_frame(frames[0]),
            "collective": coll[2] if coll else None, "threads": len(proc["threads"])}


def user_frame_lines(text: str) -> set[int]:
    """Indexes of the lines to highlight in a dump: in each thread, the innermost frame of
    the user's own code (where a stuck worker is stuck, in the user's terms)."""
    marked, pending = set(), False
    for i, line in enumerate(text.splitlines()):
        if line.startswith(HEADER) or _THREAD.match(line):
            pending = True  # a new thread: look for its innermost user frame
            continue
        m = _FRAME.match(line)
        if m and pending and is_user_file(m.group("file")):
            marked.add(i)
            pending = False
    return marked
