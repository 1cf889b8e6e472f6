"""Who a GPU process is: a worker of this run (rank), a worker's descendant (child_of), or
an outsider with its user and command from psutil ("not visible" when the pid is not in
our PID namespace). Runs on the GPU poller thread (supervisor.gpu.watch); psutil is
asked once per new pid and re-checked for pid reuse every WHO_RECHECK_S. A process first seen
with its parent's command may be a fork that has not exec'd yet (exec keeps its pid and creation
time): its command is read again at each look, SETTLE_READS times at most, until it differs.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import psutil

from mpwatch.contract import DevKey, GpuMark, GpuProcess

WHO_RECHECK_S = 10.0  # a known GPU process is checked for pid reuse this often
SETTLE_READS = 20  # looks that read again the command of a process that has its parent's


@dataclass
class Who:
    create: float | None  # psutil's create_time: tells a reused pid from the old one
    checked: float  # monotonic
    visible: bool
    user: str | None = None
    cmd: str | None = None
    ancestor: int | None = None  # the worker pid it descends from, when the sampler has not seen it yet
    unsettled: int = 0  # reads left of a command that is its parent's (a fork, perhaps not exec'd yet)


class ProcessLabeler:
    def __init__(self) -> None:
        self._who: dict[int, Who] = {}

    def refresh(self, pids: Collection[int], worker_pids: Collection[int], keep: Iterable[int] = ()) -> None:
        """Look up every pid of a new process list (each once); forget processes long gone
        (`keep`: pids still listed from earlier queries)."""
        now = time.monotonic()
        for pid in pids:
            cached = self._who.get(pid)
            if cached is None or now - cached.checked >= WHO_RECHECK_S or cached.unsettled > 0:
                self._who[pid] = _whois(pid, worker_pids, cached, now)
        if len(self._who) > 4 * len(pids) + 64:
            live = set(pids) | set(keep)
            self._who = {pid: w for pid, w in self._who.items() if pid in live}

    def label(self, pid: int, mem: int | None, by_pid: Mapping[int, int],
              children: Mapping[int, int]) -> GpuProcess:
        """The process as the status shows it (sm_util and since are the watcher's)."""
        rank = by_pid.get(pid)
        child_of = children.get(pid) if rank is None else None
        who = self._who.get(pid)
        ancestor = who.ancestor if who is not None else None
        if rank is None and child_of is None and ancestor is not None and ancestor in by_pid:
            child_of = by_pid[ancestor]  # a child the process sampler has not seen yet
        if who is None:
            return {"pid": pid, "rank": rank, "child_of": child_of, "user": None, "cmd": None,
                    "mem_bytes": mem, "visible": False, "sm_util": None}
        return {"pid": pid, "rank": rank, "child_of": child_of, "user": who.user, "cmd": who.cmd,
                "mem_bytes": mem, "visible": who.visible, "sm_util": None}


def _whois(pid: int, worker_pids: Collection[int], cached: Who | None, now: float) -> Who:
    try:
        proc = psutil.Process(pid)
        create = proc.create_time()
    except psutil.NoSuchProcess:
        return Who(None, now, visible=False, cmd="not visible")
    except psutil.Error:
        return Who(None, now, visible=True)
    if cached is not None and cached.create == create:
        cached.checked = now
        if cached.unsettled > 0:  # exec'd since?
            cached.cmd, same = _command(proc)
            cached.unsettled = cached.unsettled - 1 if same else 0
        return cached
    who = Who(create, now, visible=True)
    try:
        who.user = proc.username()
    except (psutil.Error, KeyError):  # KeyError: a uid without a passwd entry
        pass
    who.cmd, same = _command(proc)
    who.unsettled = SETTLE_READS if same else 0
    if pid not in worker_pids:
        try:
            who.ancestor = next((p.pid for p in proc.parents() if p.pid in worker_pids), None)
        except psutil.Error:
            pass
    return who


def _command(proc: psutil.Process) -> tuple[str | None, bool]:
    """Its command line (its name where it has none), and whether it is its parent's."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        argv = []
    try:
        cmd: str | None = " ".join(argv)[:200] or proc.name()
    except psutil.Error:
        cmd = None
    try:
        up = proc.parent()
        same = up is not None and bool(argv) and up.cmdline() == argv
    except psutil.Error:
        same = False
    return cmd, same


def who_text(p: GpuProcess) -> str:
    """A few words for a labelled process: rank 0, a child of rank 1, alice: python x.py."""
    if p["rank"] is not None:
        return f"rank {p['rank']}"
    if p["child_of"] is not None:
        return f"a child of rank {p['child_of']}"
    if not p["visible"]:
        return "not visible"
    return ": ".join(x for x in (p["user"], (p["cmd"] or "")[:40]) if x) or "outside the run"


def proc_marks(key: DevKey, where: str, old: Mapping[int, float], new: Mapping[int, float],
               label: Callable[[int], GpuProcess]) -> list[GpuMark]:
    """A mark for each process that appeared on a GPU's (or a MIG slice's) list or left it;
    `where` names it ("GPU 0")."""
    out: list[GpuMark] = []
    now = time.time()
    for pid in sorted(new.keys() - old.keys()):
        p = label(pid)
        out.append(_on(key, {"ts": new[pid], "gpu": key[0], "kind": "proc_started",
                             "rank": p["rank"] if p["rank"] is not None else p["child_of"], "pid": pid,
                             "text": f"pid {pid} ({who_text(p)}) on {where}"}))
    for pid in sorted(old.keys() - new.keys()):
        p = label(pid)
        out.append(_on(key, {"ts": now, "gpu": key[0], "kind": "proc_exited",
                             "rank": p["rank"] if p["rank"] is not None else p["child_of"], "pid": pid,
                             "text": f"pid {pid} ({who_text(p)}) left {where}"}))
    return out


def _on(key: DevKey, mark: GpuMark) -> GpuMark:
    if key[1] is not None and key[2] is not None:
        mark["gi"], mark["ci"] = key[1], key[2]
    return mark
