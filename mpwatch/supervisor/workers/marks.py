"""Every process of a run, found by a mark it cannot shed by re-parenting: a classic daemon
(fork, setsid, fork again, the middle one reaped) leaves its worker's process tree and its
process group, so neither finds it; these marks do.

- The environment: each worker gets MPWATCH_RUN_ID and MPWATCH_SUPERVISOR_PID (the worker
  side's contract, contract.protocol) and MPWATCH_RANK, and every descendant inherits them:
  a scan of /proc (this user's processes; /proc/PID/environ is the environment a process
  was started with, whatever it did to its own since) finds them all.
- A cgroup (v2) per run, a child cgroup per rank, where one can be made (root, or a
  delegated subtree: `cgroup_for`): a worker is moved in as it starts and its descendants are
  born there, even one that starts with an empty environment. None where none can be made.

Used at `stop`, `kill` and a worker's end (supervisor.workers.groups adopts what it finds as
foreign groups: TERM, then KILL at the deadline), before the run is called finished, and by
the watchdog (supervisor.workers.watchdog, which repeats the environment scan and empties
the cgroup when the supervisor dies). Main thread, but for `close`.
"""
from __future__ import annotations

import os
from pathlib import Path

from mpwatch.contract import numtext, protocol
from mpwatch.rundir.registry import pid_alive

CGROUP_PREFIX = "mpwatch-"


def env_mark(run_id: str, supervisor_pid: int) -> tuple[bytes, bytes]:
    """The two entries every process of the run has in its environment."""
    return (f"{protocol.ENV_RUN}={run_id}".encode(),
            f"{protocol.ENV_SUPERVISOR_PID}={supervisor_pid}".encode())


def _environ(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:  # gone, or another user's
        return None


def scan(run_id: str, supervisor_pid: int) -> dict[int, int | None]:
    """{pid: rank} of every live process of this user whose environment carries the run's
    mark (rank: its MPWATCH_RANK, None when it has none). Only this user's: a process of
    another user is never touched, whatever its environment says."""
    mark = env_mark(run_id, supervisor_pid)
    rank_key = f"{protocol.ENV_RANK}=".encode()
    uid, me = os.getuid(), os.getpid()
    out: dict[int, int | None] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:  # never another user's (root's run neither)
                continue
        except OSError:
            continue
        env = _environ(pid)
        if env is None or not all(m in env for m in mark):
            continue
        rank = next((e[len(rank_key):] for e in env if e.startswith(rank_key)), None)
        out[pid] = numtext.int_of(rank.decode("ascii", "replace"), 9) if rank is not None else None
    return out


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                head, _, tail = line.partition(" - ")
                if tail.split(" ", 1)[0] == "cgroup2":
                    return Path(head.split()[4])
    except OSError:
        pass
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def cgroup_for(run_id: str) -> Path | None:
    """A new cgroup for the run under this process's own (cgroup v2), or None where none can
    be made (no cgroup2, not root and not delegated, a read-only mount)."""
    mount, own = _cgroup2_mount(), _own_cgroup()
    if mount is None or own is None:
        return None
    parent = mount / own.lstrip("/")
    _remove_stale(parent)
    path = parent / f"{CGROUP_PREFIX}{run_id}-{os.getpid()}"
    try:
        path.mkdir()
    except OSError:
        return None
    return path


def _remove_stale(parent: Path) -> None:
    """Empty cgroups of runs whose supervisor is gone (one its watchdog could not remove in
    time, the last process slow to go) are removed; a cgroup with a process in it stays."""
    try:
        stale = [d for d in parent.iterdir() if d.name.startswith(CGROUP_PREFIX)]
    except OSError:
        return
    for d in stale:
        pid = d.name.rsplit("-", 1)[-1]
        number = numtext.int_of(pid, 9)  # a folder's name (any process of this user may make one)
        if number is None or pid_alive(number):
            continue
        try:
            for sub in d.iterdir():
                if sub.is_dir():
                    _rmdir(sub)
        except OSError:
            continue
        _rmdir(d)


class Marks:
    """The run's marks: its environment entries, and its cgroup where there is one."""

    def __init__(self, run_id: str, supervisor_pid: int):
        self.run_id = run_id
        self.supervisor_pid = supervisor_pid
        self.cgroup: Path | None = None  # made by open(), where one can be
        # The run's forkserver (supervisor.preload): it carries the marks for its children, and is
        # the supervisor's own helper, never a leftover of a worker.
        self.helper: int | None = None

    def open(self) -> None:
        """Make the run's cgroup, where one can be (before the first worker starts)."""
        self.cgroup = cgroup_for(self.run_id)

    def join(self, pid: int, rank: int) -> None:
        """A worker that just started moves into its rank's cgroup (its children are born there)."""
        if self.cgroup is None:
            return
        d = self.cgroup / f"rank-{rank}"
        try:
            d.mkdir(exist_ok=True)
            (d / "cgroup.procs").write_text(str(pid))
        except OSError:
            pass  # gone already, or not ours to move: the environment scan still finds it

    def processes(self, rank: int | None = None) -> dict[int, int | None]:
        """{pid: rank} of the run's live processes (of one rank when given): both marks."""
        found = scan(self.run_id, self.supervisor_pid)
        for r, pids in self._cgroup_members().items():
            for pid in pids:
                found.setdefault(pid, r)
        return {p: r for p, r in found.items() if (rank is None or r == rank) and p != self.helper}

    def rank_of(self, pid: int) -> int | None:
        """The rank a live process of the run belongs to by its marks (its rank's cgroup, else its
        MPWATCH_RANK beside the run's marks); None for a process without them."""
        if self.cgroup is not None:
            try:
                with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
                    line = next((ln for ln in f if ln.startswith("0::")), "")
            except OSError:
                line = ""
            head, _, leaf = line.strip().rpartition("/")
            number = numtext.int_of(leaf[5:], 9)  # a cgroup's name (a process of this user may make one)
            if head.endswith(self.cgroup.name) and leaf.startswith("rank-") and number is not None:
                return number
        env = _environ(pid)
        if env is None or not all(m in env for m in env_mark(self.run_id, self.supervisor_pid)):
            return None
        key = f"{protocol.ENV_RANK}=".encode()
        rank = next((e[len(key):] for e in env if e.startswith(key)), b"")
        return int(rank) if rank.isdigit() and len(rank) < 10 else None

    def _cgroup_members(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if self.cgroup is None:
            return out
        try:
            subs = [d for d in self.cgroup.iterdir() if d.is_dir() and d.name.startswith("rank-")]
        except OSError:
            return out
        for d in subs:
            try:
                out[int(d.name[5:])] = [int(x) for x in (d / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
        return out

    def close(self) -> None:
        """Remove the run's cgroup once empty (the watchdog tries again if it is not yet)."""
        if self.cgroup is None:
            return
        try:
            for d in self.cgroup.iterdir():
                if d.is_dir():
                    _rmdir(d)
        except OSError:
            pass
        _rmdir(self.cgroup)


def _rmdir(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:  # not empty yet (the watchdog tries again), or gone
        pass
