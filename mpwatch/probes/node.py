"""What else the node does (psutil and /proc): the processes outside the run that take its CPUs,
the share of CPU time spent waiting on I/O, swapping and major page faults, each over the time
since the last look. Read-only; the slowdown watch (supervisor.diagnose.slowdown_watch) looks on
the main thread, only while the run is slower than its own best, every few seconds.

One pass over the process table a look: each process's parent and CPU time from one read of its
/proc/PID/stat (psutil's oneshot), its user and command only for the few that take the most. The
run is the supervisor's own tree and the processes it is told about (a worker's descendant that
left it).
"""
from __future__ import annotations

import os
import resource
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import psutil

from mpwatch.contract import Outsider

TOP = 8  # outsiders named, the busiest first
MIN_CPU = 0.1  # an outsider takes at least this share of a CPU to be named
VMSTAT_MAX = 64 * 1024  # /proc/vmstat read at most this far
VM_KEYS = (b"pgmajfault", b"pswpin", b"pswpout")
PAGE = resource.getpagesize()  # /proc/vmstat counts swapped pages


@dataclass(frozen=True)
class NodeLoad:
    """The node over the time since the last look."""

    seconds: float  # the time between the two looks
    cpus: int
    outsiders: list[Outsider]  # the busiest processes outside the run, at MIN_CPU or more
    outside_cpu: float  # CPUs all those at MIN_CPU or more took together
    outside_n: int  # how many they are
    iowait: float | None  # the share of the node's CPU time spent waiting on I/O
    swap_bps: float | None  # bytes swapped in and out a second
    majfaults: float | None  # major page faults a second (pages read from disk at a touch)


@dataclass
class _Seen:
    create: float
    cpu: float  # its CPU seconds at the last look


@dataclass
class NodeProbe:
    own: int = field(default_factory=os.getpid)  # the supervisor: its tree is the run
    _seen: dict[int, _Seen] = field(default_factory=dict)
    _at: float | None = None
    _times: tuple[float, float | None] | None = None  # the node's CPU seconds and I/O wait at the last look
    _vm: dict[bytes, int] = field(default_factory=dict)
    _who: dict[tuple[int, float], tuple[str | None, str, str]] = field(default_factory=dict)

    def look(self, run: Collection[int] = ()) -> NodeLoad | None:
        """The node since the last look (run: pids of the run besides the supervisor's tree); None
        at the first look, which only takes the counters."""
        now = time.monotonic()
        procs, parent = self._scan()
        times, vm = cpu_seconds(), vmstat()
        last, last_times, last_vm = self._at, self._times, self._vm
        self._at, self._times, self._vm = now, times, vm
        if last is None or now - last <= 0:
            return None
        secs = now - last
        mine = _tree({self.own, *run}, parent)
        busy = sorted(((cpu / secs, pid) for pid, cpu in procs.items()
                       if pid not in mine and cpu / secs >= MIN_CPU), reverse=True)
        outs = [o for share, pid in busy[:TOP] if (o := self._outsider(pid, share)) is not None]
        return NodeLoad(secs, cpus(), outs, round(sum(s for s, _ in busy), 2), len(busy),
                        _iowait(last_times, times), _rate(last_vm, vm, (b"pswpin", b"pswpout"), secs, PAGE),
                        _rate(last_vm, vm, (b"pgmajfault",), secs, 1))

    def _scan(self) -> tuple[dict[int, float], dict[int, int]]:
        """Each process's CPU seconds since the last look (0 for one new since), and its parent."""
        spent: dict[int, float] = {}
        parent: dict[int, int] = {}
        seen: dict[int, _Seen] = {}
        for p in psutil.process_iter():
            try:
                with p.oneshot():
                    ppid, t, create = p.ppid(), p.cpu_times(), p.create_time()
            except psutil.Error:
                continue
            cpu = t.user + t.system
            before = self._seen.get(p.pid)
            seen[p.pid] = _Seen(create, cpu)
            parent[p.pid] = ppid
            spent[p.pid] = cpu - before.cpu if before is not None and before.create == create else 0.0
        self._seen = seen
        return spent, parent

    def _outsider(self, pid: int, share: float) -> Outsider | None:
        s = self._seen.get(pid)
        if s is None:
            return None
        key = (pid, s.create)
        who = self._who.get(key)
        if who is None:
            who = self._who[key] = _whois(pid)
            if len(self._who) > 8 * TOP:
                live = {(p, x.create) for p, x in self._seen.items()}
                self._who = {k: v for k, v in self._who.items() if k in live}
        user, name, cmd = who
        return Outsider(pid=pid, user=user, name=name, cmd=cmd, cpu=round(share, 2))


def _whois(pid: int) -> tuple[str | None, str, str]:
    """Its user, name and command line (cut), as far as psutil may read them."""
    try:
        proc = psutil.Process(pid)
        name = proc.name()
    except psutil.Error:
        return None, "?", "?"
    try:
        user: str | None = proc.username()
    except (psutil.Error, KeyError):  # KeyError: a uid without a passwd entry
        user = None
    try:
        cmd = " ".join(proc.cmdline())[:200] or name
    except psutil.Error:
        cmd = name
    return user, name, cmd


def _tree(roots: set[int], parent: dict[int, int]) -> set[int]:
    """The roots and every process below them."""
    kids: dict[int, list[int]] = {}
    for pid, pp in parent.items():
        kids.setdefault(pp, []).append(pid)
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += kids.get(pid, [])
    return out


def cpus() -> int:
    return psutil.cpu_count() or 1


def cpu_seconds() -> tuple[float, float | None]:
    """The node's CPU seconds in all, and in I/O wait (None where the system does not tell)."""
    t = psutil.cpu_times()
    wait = getattr(t, "iowait", None)
    return float(sum(t)), float(wait) if isinstance(wait, (int, float)) else None


def _iowait(a: tuple[float, float | None] | None, b: tuple[float, float | None]) -> float | None:
    """The share of CPU time spent waiting on I/O between two looks."""
    if a is None or a[1] is None or b[1] is None or b[0] <= a[0]:
        return None
    return round(max(0.0, (b[1] - a[1]) / (b[0] - a[0])), 3)


def vmstat() -> dict[bytes, int]:
    """The counters of /proc/vmstat the probe reads ({} where there is none)."""
    try:
        with open("/proc/vmstat", "rb") as f:
            text = f.read(VMSTAT_MAX)
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(b" ")
        if k in VM_KEYS and v.strip().isdigit():
            out[k] = int(v)
    return out


def _rate(a: dict[bytes, int], b: dict[bytes, int], keys: tuple[bytes, ...], secs: float,
          unit: int) -> float | None:
    if not all(k in a and k in b for k in keys):
        return None
    return round(max(0, sum(b[k] - a[k] for k in keys)) * unit / secs, 1)
