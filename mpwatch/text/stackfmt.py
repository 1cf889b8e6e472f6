"""Reading faulthandler stack dumps: which frame is the user's own code, where a thread
waits, which collective it is in, and the dump as the TUI's stack view shows it (the main
thread first, mpwatch's own threads folded, one line a frame). Pure text functions, shared
by the supervisor (which summarises each dump, on its dump thread) and the TUI (its UI
thread)."""
from __future__ import annotations

import os
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from mpwatch.contract import numtext

HEADER = "=== mpwatch stack dump: pid "  # the line the supervisor writes before each process
NATIVE = "--- py-spy"  # the supervisor appends py-spy's native stacks after this line
# Line numbers and pids are ASCII digits within bounds (contract.numtext): a dump is text a
# worker can write, and a frame "line" of 5,000 digits is no frame, never an int() that raises.
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]{1,16}) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>[0-9]{1,9}) in (?P<func>.*)$')
_STDLIB = re.compile(r"/lib/python3(?:\.[0-9]{1,3})?/(.+)$")

COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
    "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "send", "recv", "wait",
    "_wait", "batch_isend_irecv", "new_group", "init_process_group", "rendezvous", "_store_based_barrier",
}

Frame = tuple[str, int, str]  # (file, line, function)


class ThreadDump(TypedDict):
    id: str
    current: bool  # the thread that ran the handler: the main thread
    frames: list[Frame]  # innermost first


class ProcDump(TypedDict):
    pid: int | None
    threads: list[ThreadDump]


def parse(text: str) -> list[ProcDump]:
    """faulthandler dumps -> [{pid, threads: [{id, current, frames: [(file, line, func)]}]}],
    innermost frame first. Lines that are neither headers nor frames are skipped."""
    procs: list[ProcDump] = []
    cur: ProcDump | None = None
    thread: ThreadDump | None = None
    for line in text.splitlines():
        if line.startswith(HEADER):
            cur = {"pid": _header_pid(line), "threads": []}
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


def _header_pid(line: str) -> int | None:
    words = line[len(HEADER):len(HEADER) + 64].split()
    return numtext.int_of(words[0]) if words else None


def main_thread(proc: ProcDump) -> ThreadDump | None:
    """The thread that ran the handler is the main thread (the kernel delivers a
    process-directed signal to it first); failing that, the oldest thread, listed last."""
    threads = proc["threads"]
    cur = [t for t in threads if t["current"]]
    return cur[0] if cur else (threads[-1] if threads else None)


_LIBRARY_DIRS = tuple({p for p in (sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib",
                                                                           "purelib", "platlib")) if p})
_MPWATCH_DIR = str(Path(__file__).resolve().parent.parent)  # the package: this module is text.stackfmt
# Where the worker side lived before it moved into mpwatch/worker/: a dump an older mpwatch
# wrote (a recorded run replayed, another machine's checkout) names these.
_FORMER = frozenset({"worker.py", "worker_cuda.py", "sender", "live", "auto", "_inject"})


def is_mpwatch_file(path: str) -> bool:
    """A file of this package, wherever it is installed (a dump may come from another
    machine's checkout): under this package's directory, or a `mpwatch/...` path naming
    one of its modules, now or before they moved."""
    if path.startswith(_MPWATCH_DIR):
        return True
    _, sep, rest = path.rpartition("/mpwatch/")
    if not sep or not rest.endswith(".py"):
        return False
    return os.path.isfile(os.path.join(_MPWATCH_DIR, rest)) or rest.partition("/")[0] in _FORMER


def is_user_file(path: str) -> bool:
    """A frame of the user's own code: not the standard library, not an installed
    package, not mpwatch, not a frozen module."""
    if not path or path.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path or "/lib/python3" in path:
        return False
    return not (path.startswith(_LIBRARY_DIRS) or is_mpwatch_file(path))


def short_path(path: str) -> str:
    """A frame's file without the prefixes everyone has: the standard library's directory,
    site-packages; mpwatch's own as mpwatch/...; the user's own as written."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    if is_mpwatch_file(path):
        return "mpwatch/" + path.rpartition("/mpwatch/")[2]
    m = _STDLIB.search(path)
    return m.group(1) if m else path


def fmt_frame(frame: Frame) -> str:
    file, line, func = frame
    return f"{func} ({os.path.basename(file)}:{line})"


def collective_frame(frames: list[Frame]) -> Frame | None:
    """The torch.distributed call a thread waits in, if any (innermost first)."""
    for f in frames:
        if ("torch/distributed" in f[0] or "torch\\distributed" in f[0]) and f[2] in COLLECTIVES:
            return f
    return None


# What a native (py-spy --native) main thread waits in, by a C++ frame torch shows there: the
# collective a Python stack cannot show (DDP all-reduces gradients inside backward()).
_NATIVE_WAITS = (
    ("c10d::Reducer::", "DDP's gradient all-reduce (backward)"),
    ("ProcessGroupNCCL::WorkNCCL::wait", "an NCCL collective"),
    ("ProcessGroupGloo::", "a gloo collective"),
    ("gloo::", "a gloo collective"),
)
_NATIVE_PID = re.compile(r"^--- py-spy --native: pid ([0-9]{1,18}) ---")
_NATIVE_THREAD = re.compile(r'^Thread ([0-9]{1,18}) \(\w{1,64}\)(?:: "(.*)")?')


def native_collective(text: str, pid: int) -> str | None:
    """The collective the main thread of `pid` waits in, as its native stack tells (the py-spy
    part of a dump), or None."""
    mine, main = False, False
    for line in text.splitlines():
        m = _NATIVE_PID.match(line)
        if m:
            mine, main = int(m.group(1)) == pid, False
            continue
        t = _NATIVE_THREAD.match(line)
        if t:
            main = mine and (t.group(1) == str(pid) or t.group(2) == "MainThread")
            continue
        if main:
            for marker, name in _NATIVE_WAITS:
                if marker in line:
                    return name
    return None


class DumpSummary(TypedDict, total=False):
    """Where a dumped process's main thread is (all keys missing when the dump lacks it)."""

    where: str | None  # the innermost frame of the user's own code
    innermost: str | None  # the innermost Python frame
    collective: str | None  # the torch.distributed call it waits in
    threads: int


def summarize(text: str, pid: int | None = None) -> DumpSummary:
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


# ------------------------------------------------------------- the stack view ----
@dataclass(frozen=True)
class FrameView:
    func: str
    where: str  # short path:line
    user: bool  # the user's own code (drawn bright; library frames dim)
    marked: bool  # the thread's innermost frame of the user's own code


@dataclass
class ThreadView:
    title: str
    main: bool
    mpwatch: bool  # mpwatch's own thread (the report sender): folded
    frames: list[FrameView]


@dataclass
class ProcView:
    heading: str  # the supervisor's line: pid, time, why
    threads: list[ThreadView]  # the main thread first, mpwatch's threads last
    native: list[str] = field(default_factory=list)  # py-spy's native stacks, as it wrote them


def _thread_view(t: ThreadDump, main: bool, user_dir: str) -> ThreadView:
    frames, marked_one = [], False
    for file, line, func in t["frames"]:
        user = is_user_file(file)
        marked = user and not marked_one
        marked_one = marked_one or marked
        where = file[len(user_dir):] if user and user_dir and file.startswith(user_dir) else short_path(file)
        frames.append(FrameView(func, f"{where}:{line}", user, marked))
    ours = any(is_mpwatch_file(f) for f, _, _ in t["frames"]) and not main
    title = "main thread" if main else f"thread {t['id']}"
    return ThreadView(title + (" (mpwatch's report sender)" if ours else ""), main, ours, frames)


def stack_view(text: str) -> list[ProcView]:
    """A dump as the stack view shows it, process by process."""
    out: list[ProcView] = []
    headings: list[str] = []
    natives: list[list[str]] = []
    in_native = False
    for line in text.splitlines():
        if line.startswith(HEADER):
            headings.append(line.strip("= ").strip())
            natives.append([])
            in_native = False
        elif line.startswith(NATIVE):
            in_native = True
        if in_native and natives:
            natives[-1].append(line)
    procs = parse(text)
    for i, proc in enumerate(procs):
        main = main_thread(proc)
        # The user's files are named from the directory they share (the script's, usually).
        files = {f for t in proc["threads"] for f, _, _ in t["frames"]
                 if is_user_file(f) and f.startswith("/")}
        user_dir = os.path.commonpath([os.path.dirname(f) for f in files]) + "/" if files else ""
        views = [_thread_view(t, t is main, user_dir if user_dir != "/" else "") for t in proc["threads"]]
        views.sort(key=lambda v: (not v.main, v.mpwatch))
        heading = headings[i] if i < len(headings) and len(headings) == len(procs) else f"pid {proc['pid']}"
        native = natives[i] if i < len(natives) and len(natives) == len(procs) else []
        out.append(ProcView(heading, views, native))
    return out
