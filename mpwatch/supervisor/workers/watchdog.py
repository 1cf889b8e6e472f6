"""Kills every worker process group when the supervisor dies, however it dies.

Run as `python -I -S supervisor.workers.watchdog` with a pipe from the supervisor on stdin. The
supervisor writes "+PGID" when a worker starts and "-PGID" once that group is empty.
When the pipe reaches EOF (the supervisor exited, even by SIGKILL) every group still
listed gets SIGKILL: this reaches the DataLoader workers and other grandchildren, which
a parent-death signal alone would leave behind. Standard library only, starts in ms.
"""
import os
import signal


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
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
                return
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if line[:1] == b"+":
                groups.add(pgid)
            elif line[:1] == b"-":
                groups.discard(pgid)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    main()
