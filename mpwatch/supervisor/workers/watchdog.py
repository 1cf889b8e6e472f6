"""Kills every process of the run when the supervisor dies, however it dies.

Run as `python -I -S supervisor.workers.watchdog [MARK MARK [CGROUP]]` with a
pipe from the supervisor on stdin. The supervisor writes "+PGID" when a worker starts and
"-PGID" once that group is empty. When the pipe reaches EOF (the supervisor exited, even by
SIGKILL) every group still listed gets SIGKILL: this reaches the DataLoader workers and
other grandchildren, which a parent-death signal alone would leave behind. Then the run's
marks (supervisor.workers.marks, given as arguments: this process imports nothing of
mpwatch) are swept a few times: every process of this user whose environment holds both
MARK entries (its run id and supervisor pid: a daemon that left its group), and every
process in the run's cgroup, get SIGKILL; the emptied cgroup is removed. Standard library
only, starts in ms.
"""
import os
import signal
import sys
import time

SWEEPS = 5  # a process forked between two sweeps is caught by the next
SWEEP_GAP_S = 0.05


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups = read_groups()
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    if len(sys.argv) >= 3:
        sweep(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)


def read_groups() -> set[int]:
    """The groups listed when the pipe ends."""
    groups: set[int] = set()
    pending = b""
    while True:
        try:
            data = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line == b"quit":
                sys.exit(0)
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if line[:1] == b"+":
                groups.add(pgid)
            elif line[:1] == b"-":
                groups.discard(pgid)
    return groups


def sweep(run_entry: str, supervisor_entry: str, cgroup: str | None) -> None:
    mark = (run_entry.encode(), supervisor_entry.encode())
    for _ in range(SWEEPS):
        pids = marked(mark) | in_cgroup(cgroup)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(SWEEP_GAP_S)
    if cgroup:
        remove_cgroup(cgroup)


def marked(mark: tuple[bytes, bytes]) -> set[int]:
    uid, me = os.getuid(), os.getpid()
    out: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat("/proc/" + name).st_uid != uid:  # never another user's
                continue
            with open("/proc/" + name + "/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(m in env for m in mark):
            out.add(int(name))
    return out


def in_cgroup(cgroup: str | None) -> set[int]:
    out: set[int] = set()
    if not cgroup:
        return out
    try:
        subs = [os.path.join(cgroup, d) for d in os.listdir(cgroup)]
    except OSError:
        return out
    for d in subs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                out.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def remove_cgroup(cgroup: str) -> None:
    """The run's cgroup and its ranks', once their last process is gone (at most 3 s; the next
    run's supervisor removes one left empty later)."""
    deadline = time.monotonic() + 3.0
    while True:
        try:
            for d in os.listdir(cgroup):
                if os.path.isdir(os.path.join(cgroup, d)):
                    try:
                        os.rmdir(os.path.join(cgroup, d))
                    except OSError:
                        pass
            os.rmdir(cgroup)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


if __name__ == "__main__":
    main()
