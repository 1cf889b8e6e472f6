"""What a stalled worker is doing, from /proc (and the sampler's CPU figure): busy,
blocked (with the kernel wait channel when readable), stopped, zombie, or in an
uninterruptible wait (D).

`read_facts` is the thin shell over /proc; `classify` is the pure decision. The main
thread's state is what matters (a stuck training loop is the main thread), so it is
read a few times: one instant can catch a blocked thread during a brief wake-up.
Runs on the supervisor's main loop (a stalled worker, every few seconds).
"""
from __future__ import annotations

import os
import platform
import sys
import time
from typing import TypedDict

from mpwatch.contract import numtext

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired

BUSY_CPU = 50.0  # percent of one core, over the sampler's last interval
STATE_READS = 3

# A few syscall numbers worth naming when wchan is unreadable (it reads "0" on kernels
# that hide kernel symbols). /proc/PID/syscall needs ptrace access; often readable for
# our own children.
_SYSCALLS = {
    "x86_64": {0: "read", 7: "poll", 23: "select", 35: "nanosleep", 43: "accept", 45: "recvfrom",
               47: "recvmsg", 61: "wait4", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait",
               270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 288: "accept4", 441: "epoll_pwait2",
               449: "futex_waitv", 16: "ioctl", 1: "write", 17: "pread64"},
    "aarch64": {63: "read", 73: "ppoll", 72: "pselect6", 101: "nanosleep", 115: "clock_nanosleep",
                98: "futex", 22: "epoll_pwait", 207: "recvfrom", 212: "recvmsg", 202: "accept",
                242: "accept4", 260: "wait4", 29: "ioctl", 64: "write"},
}

def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _stat_state(text: str | None) -> str | None:
    # The command name may hold spaces and parentheses: the state follows the last ')'.
    if not text:
        return None
    try:
        return text[text.rindex(")") + 2]
    except (ValueError, IndexError):
        return None


def _has_nvidia(pid: int) -> bool:
    """A CUDA context keeps /dev/nvidia* open (nvidiactl, nvidia0, nvidia-uvm)."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/dev/nvidia"):
                    return True
            except OSError:
                continue
    except OSError:
        pass
    maps = _read(f"/proc/{pid}/maps")
    return bool(maps and "/dev/nvidia" in maps)


class Facts(TypedDict):
    """What /proc says of a process; None (or empty) where it could not be read."""

    pid: int
    states: list[str]  # the main thread's state letter, read `reads` times (R S D T t Z X I)
    wchan: str | None  # the kernel function it sleeps in
    syscall: str | None  # the system call it is in, or "running"
    threads: dict[int, str]  # tid -> state letter
    nvidia: bool  # it holds /dev/nvidia* open (a CUDA context)


class Diagnosis(TypedDict):
    """What a stalled worker is doing; kind, detail, wchan and gpu go to status.StallInfo."""

    kind: str  # busy | blocked | stopped | zombie | uninterruptible | gone
    detail: str  # one sentence for the user
    wchan: str | None
    state: str | None  # the main thread's state letter
    syscall: NotRequired[str | None]
    gpu: NotRequired[bool]


def read_facts(pid: int, reads: int = STATE_READS, scan_gpu: bool = True) -> Facts:
    """Raw facts about a process from /proc; missing pieces stay None. scan_gpu=False
    skips the look for NVIDIA device files (when the caller already knows)."""
    states: list[str] = []
    for i in range(reads):
        st = _stat_state(_read(f"/proc/{pid}/stat"))
        if st is None:
            break
        states.append(st)
        if i + 1 < reads:
            time.sleep(0.005)
    wchan = (_read(f"/proc/{pid}/wchan") or "").strip()
    syscall = None
    raw = _read(f"/proc/{pid}/syscall")
    if raw:
        head = raw.split()[0] if raw.split() else ""
        if (number := numtext.int_of(head, 6, signed=True)) is not None:
            syscall = _SYSCALLS.get(platform.machine(), {}).get(number, f"syscall {head}")
        elif head == "running":
            syscall = "running"
    threads: dict[int, str] = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            st = _stat_state(_read(f"/proc/{pid}/task/{tid}/stat"))
            if st:
                threads[int(tid)] = st
    except OSError:
        pass
    return {"pid": pid, "states": states, "wchan": wchan if wchan not in ("", "0") else None,
            "syscall": syscall, "threads": threads,
            "nvidia": _has_nvidia(pid) if states and scan_gpu else False}


def classify(facts: Facts, cpu_percent: float | None = None, cuda: bool = False) -> Diagnosis:
    """{kind, detail, wchan, state}: kind is one of busy, blocked, stopped, zombie,
    uninterruptible, gone. `cuda` says the worker has a CUDA context."""
    states = facts.get("states") or []
    if not states:
        return {"kind": "gone", "detail": "the process is gone", "wchan": None, "state": None}
    # The state seen most often; ties go to the latest read.
    main = max(reversed(states), key=states.count)
    wchan = facts.get("wchan")
    sc = facts.get("syscall")
    where = wchan or (sc if sc and sc != "running" else None)
    in_kernel = f" in {where}" if where else ""
    threads = facts.get("threads") or {}
    running_threads = sum(1 for s in threads.values() if s == "R")
    gpu = cuda or bool(facts.get("nvidia"))
    cpu = f"{cpu_percent:.0f}% CPU" if cpu_percent is not None else None
    if main in ("Z", "X"):
        return {"kind": "zombie", "detail": "zombie: it has exited but was not reaped yet",
                "wchan": None, "state": main}
    if main in ("T", "t"):
        why = "stopped by a signal (SIGSTOP/SIGTSTP): it runs again on SIGCONT" if main == "T" \
            else "stopped by a tracer (a debugger or py-spy attached)"
        return {"kind": "stopped", "detail": why, "wchan": wchan, "state": main}
    if main == "D":
        return {"kind": "uninterruptible",
                "detail": f"uninterruptible kernel wait (D){in_kernel}: usually disk, network "
                          f"filesystem or a driver" + ("; on a GPU worker, the GPU driver" if gpu else "")
                          + "; signals wait until it returns",
                "wchan": wchan, "state": main}
    busy = main == "R" or (cpu_percent is not None and cpu_percent >= BUSY_CPU)
    if busy:
        who = "the main thread spins" if main == "R" else f"{running_threads or 'some'} other thread(s) spin"
        detail = (f"busy: {who}" + (f" ({cpu})" if cpu else "")
                  + " without progress: a loop or a spinning wait")
        if gpu:
            detail += "; this worker has a CUDA context, so it may be waiting on a hung CUDA kernel " \
                      "(a host thread can spin at full CPU while it waits for the GPU)"
        return {"kind": "busy", "detail": detail, "wchan": wchan, "state": main, "gpu": gpu}
    detail = f"blocked: the main thread sleeps in the kernel{in_kernel}"
    if wchan and sc and sc not in ("running",) and sc != wchan:
        detail += f" ({sc})"
    detail += " (a lock, a read, a collective or a sleep)"
    if cpu and cpu_percent is not None and cpu_percent >= 5:
        detail += f"; the process still uses {cpu}"
    return {"kind": "blocked", "detail": detail, "wchan": wchan, "syscall": sc, "state": main, "gpu": gpu}


def probe(pid: int, cpu_percent: float | None = None, cuda: bool = False,
          reads: int = STATE_READS) -> Diagnosis:
    """classify(read_facts(pid)): a few /proc reads (about a millisecond with reads=1);
    the look for NVIDIA files is skipped when `cuda` already says yes."""
    return classify(read_facts(pid, reads=reads, scan_gpu=not cuda), cpu_percent=cpu_percent, cuda=cuda)
