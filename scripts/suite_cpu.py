#!/usr/bin/env python3
"""Where a command's CPU goes, by kind of process: `python3 scripts/suite_cpu.py make test`.

Runs the command, reads /proc every 0.2 s meanwhile (each process's own user+system time, and the
machine's busy and idle time from /proc/stat), then prints the machine's busy and idle CPU-s over the
command and the CPU of the processes it saw, summed by kind (pytest lanes, supervisors, forkservers,
workers by script, tmux, ...). A process that lived under 0.2 s may be missed, and what a process
spent after its last reading is lost: the sums are a floor. Processes that were already running
count only what they spent after the first reading. SUITE_CPU_DUMP=FILE: each process
as a JSON line (kind, CPU-s, start tick, pid, command). Linux only; standard library only.
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import threading
import time

HZ = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 0.2


def machine() -> tuple[float, float]:
    """(busy, idle) CPU-s of the machine since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / HZ, (v[3] + v[4]) / HZ


def read(pid: int) -> tuple[str, float] | None:
    """(start time, own CPU-s) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    return rest[19], (int(rest[11]) + int(rest[12])) / HZ


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return ""


def kind(cmd: str) -> str:
    if "exec(eval(sys.stdin.readline()))" in cmd or "-m pytest" in cmd or "tests.ci" in cmd:
        return "pytest (lanes and controller)"
    if "exec(input())" in cmd:
        return "forkserver (preload)"
    if "watchdog.py" in cmd:
        return "watchdog"
    if re.search(r"-m mpwatch (--headless|-n )|bin/mpwatch (--headless|-n )", cmd):
        return "supervisor"
    m = re.search(r"(?:-m mpwatch|bin/mpwatch) (\w+)", cmd)
    if m:
        return f"mpwatch {m.group(1)}"
    if "while True: pass" in cmd:
        return "busy loop (tests)"
    for name in ("tmux", "sshd", "ssh ", "mypy", "ruff", "pip", "compileall", "py-spy"):
        if name in cmd:
            return name.strip()
    m = re.search(r"([\w.-]+\.py)\b", cmd)
    if m:
        return f"worker {m.group(1)}"
    return "other"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    seen: dict[tuple[int, str], list] = {}  # (pid, start) -> [cmdline, first CPU, last CPU, readings]
    done = threading.Event()

    def sample(first: bool) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            got = read(int(name))
            if got is None:
                continue
            key = (int(name), got[0])
            rec = seen.get(key)
            if rec is None:
                rec = seen[key] = [cmdline(int(name)), got[1] if first else 0.0, got[1], 0]
            elif rec[3] < 25:  # a forked worker takes its own command line after a moment
                rec[0] = cmdline(int(name)) or rec[0]
            rec[2], rec[3] = got[1], rec[3] + 1

    def loop() -> None:
        sample(first=True)
        while not done.wait(INTERVAL_S):
            sample(first=False)

    busy0, idle0 = machine()
    t0 = time.monotonic()
    watcher = threading.Thread(target=loop, daemon=True)
    watcher.start()
    code = subprocess.call(argv)
    done.set()
    watcher.join()
    busy1, idle1 = machine()
    by: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for cmd, first, last, _ in seen.values():
        k = kind(cmd)
        by[k] += last - first
        count[k] += 1
    if os.environ.get("SUITE_CPU_DUMP"):  # each process as a JSON line: [kind, CPU-s, start tick, command]
        with open(os.environ["SUITE_CPU_DUMP"], "w") as out:
            for (pid, start), (cmd, first, last, _) in seen.items():
                out.write(json.dumps([kind(cmd), round(last - first, 2), int(start), pid, cmd]) + "\n")
    seen_cpu = sum(by.values())
    print(f"\nsuite_cpu: {time.monotonic() - t0:.1f} s; the machine busy {busy1 - busy0:.1f} CPU-s, "
          f"idle {idle1 - idle0:.1f} CPU-s; the processes seen {seen_cpu:.1f} CPU-s:", file=sys.stderr)
    for k, cpu in by.most_common(30):
        print(f"  {cpu:8.1f} CPU-s  {count[k]:6d} processes  {k}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
