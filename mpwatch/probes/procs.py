"""Process trees of the workers via psutil: CPU%, RSS, state and descendants.

One pass over the process table per sample builds the parent->children map, so 256
workers cost one scan, not 256. psutil.Process objects are cached by pid because
cpu_percent() measures between two calls on the same object. Runs on the supervisor's
sampler thread.
"""
from __future__ import annotations

import os
import sys
import time
from collections import deque
from typing import TypedDict

import psutil

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired

TREE_S = 2.0  # new descendants are found within this long (a full process-table scan)
WAIT_SAMPLES = 8  # a worker's cpu_wait is over its last samples, not one second's luck


class ProcInfo(TypedDict):
    """One process of a worker's tree: the worker itself (with `children`) or a descendant
    (with `cmd` and `ppid`), as the supervisor folds them into status.ChildStatus."""

    pid: int
    pgid: int
    cpu_percent: float
    rss_bytes: int | None  # None: never read but as 0 (see ProcProbe._rss_of)
    status: str  # psutil's: running, sleeping, stopped, zombie, disk-sleep
    name: str
    cmd: NotRequired[str]
    ppid: NotRequired[int | None]
    children: NotRequired[list[ProcInfo]]
    # a worker's: the share of the time over its last samples (about WAIT_SAMPLES seconds) its main
    # thread was ready to run but waited for a CPU (the kernel's schedstat run delay); absent where unknown
    cpu_wait: NotRequired[float]


def run_delay(pid: int) -> float | None:
    """Seconds the process's main thread has waited on a run queue, ready to run (the second
    field of /proc/PID/schedstat); None where the kernel does not keep it."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read(256).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class ProcProbe:
    def __init__(self) -> None:
        self._cache: dict[int, psutil.Process] = {}
        # pid -> (monotonic, run delay) of its last samples: cpu_wait is over WAIT_SAMPLES of them
        self._delays: dict[int, deque[tuple[float, float]]] = {}
        self._tree: tuple[dict[int, list[int]], dict[int, int]] | None = None
        self._tree_at = 0.0
        self._tree_roots: set[int] = set()
        self._rss: dict[int, int] = {}  # pid -> its last resident size read above 0

    def _proc(self, pid: int) -> psutil.Process:
        p = self._cache.get(pid)
        if p is None:
            p = psutil.Process(pid)
            p.cpu_percent(None)  # prime: the first call has no interval to measure
            self._cache[pid] = p
        return p

    def _info(self, pid: int) -> ProcInfo | None:
        try:
            p = self._proc(pid)
            with p.oneshot():
                return {
                    "pid": pid,
                    "pgid": os.getpgid(pid),
                    "cpu_percent": round(p.cpu_percent(None), 1),
                    "rss_bytes": self._rss_of(pid, p.memory_info().rss),
                    "status": p.status(),
                    "name": p.name(),
                }
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError):
            self._cache.pop(pid, None)
            return None

    def _rss_of(self, pid: int, rss: int) -> int | None:
        """A live process holds memory: a resident size of 0 is one whose memory is gone
        already (a zombie not yet reaped, one tearing its memory down on its way out) while
        its row still says running. Its last size read above 0 stands for it, never a 0."""
        if rss > 0:
            self._rss[pid] = rss
            return rss
        return self._rss.get(pid)

    def _scan_tree(self) -> tuple[dict[int, list[int]], dict[int, int]]:
        """Parent -> children over the whole process table (the costly part of a sample)."""
        kids: dict[int, list[int]] = {}
        parent: dict[int, int] = {}
        # ppid() alone: process_iter(attrs) would build a dict per process, twice the cost.
        for p in psutil.process_iter():
            try:
                ppid = p.ppid()
            except psutil.Error:
                continue
            if ppid:
                kids.setdefault(ppid, []).append(p.pid)
                parent[p.pid] = ppid
        self._tree = (kids, parent)
        self._tree_at = time.monotonic()
        return self._tree

    def sample(self, pids: list[int], tree_s: float = TREE_S) -> dict[int, ProcInfo]:
        """{worker pid: {cpu_percent, rss_bytes, status, children: [...]}} for live pids.
        The process table is scanned for new descendants every `tree_s` seconds (and when a
        worker is new); CPU and RSS of the processes already known are read at every sample."""
        tree = self._tree
        if tree is None or time.monotonic() - self._tree_at >= tree_s or set(pids) - self._tree_roots:
            tree = self._scan_tree()
            self._tree_roots = set(pids)
        kids, parent = tree
        out: dict[int, ProcInfo] = {}
        seen = set()
        for pid in pids:
            info = self._info(pid)
            if info is None:
                continue
            seen.add(pid)
            children: list[ProcInfo] = []
            stack = list(kids.get(pid, ()))
            while stack:
                cpid = stack.pop()
                cinfo = self._info(cpid)
                if cinfo is None:
                    continue
                seen.add(cpid)
                try:
                    cinfo["cmd"] = " ".join(self._cache[cpid].cmdline())[:200]
                except (psutil.Error, KeyError):
                    cinfo["cmd"] = cinfo["name"]
                cinfo["ppid"] = parent.get(cpid)
                children.append(cinfo)
                stack.extend(kids.get(cpid, ()))
            info["children"] = sorted(children, key=lambda c: c["pid"])
            self._cpu_wait(info)
            out[pid] = info
        for stale in set(self._cache) - seen:
            self._cache.pop(stale, None)
        for stale in set(self._delays) - seen:
            del self._delays[stale]
        for gone in set(self._rss) - seen:
            del self._rss[gone]
        return out

    def _cpu_wait(self, info: ProcInfo) -> None:
        """A worker's share of time ready to run but without a CPU, since its last sample."""
        pid, now = info["pid"], time.monotonic()
        delay = run_delay(pid)
        if delay is None:
            return
        got = self._delays.setdefault(pid, deque(maxlen=WAIT_SAMPLES))
        got.append((now, delay))
        t0, d0 = got[0]
        if now - t0 > 0.2:
            info["cpu_wait"] = round(min(1.0, max(0.0, (delay - d0) / (now - t0))), 3)


def descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of a process group; used only while killing one."""
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out
