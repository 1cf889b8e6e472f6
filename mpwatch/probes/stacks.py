"""Stack capture through the faulthandler that the start-up hook arms on SIGUSR1.

faulthandler writes from C without the GIL, so it dumps a main thread blocked in a lock,
a socket read or a C loop. Each process of a rank appends to the rank's stack file; we
write our own header line (pid, time) before signalling each process, then copy the
new bytes into rank-N/stacks/<time>.txt. A process is only signalled when it has a
handler for SIGUSR1 installed: the default action would kill it.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

SETTLE_S = 0.15  # output is complete once the file stops growing this long
MAX_WAIT_S = 2.0


def handles_sigusr1(pid: int) -> bool:
    """True when the process catches SIGUSR1 (SigCgt in /proc; psutil does not expose it)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    mask = int(line.split()[1], 16)
                    return bool(mask & (1 << (signal.SIGUSR1 - 1)))
    except (OSError, ValueError):
        pass
    return False


def _wait_settled(path: Path, start_size: int) -> int:
    deadline = time.monotonic() + MAX_WAIT_S
    last, last_change = start_size, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.02)
        try:
            size = path.stat().st_size
        except OSError:
            return last
        if size != last:
            last, last_change = size, time.monotonic()
        elif size > start_size and time.monotonic() - last_change >= SETTLE_S:
            return size
    return last


def capture(pids: list[int], stack_file: Path, out_dir: Path, label: str = "") -> tuple[Path, list[str]]:
    """Dump every listed process's threads into a new file; returns (path, notes).
    Notes say which processes could not be dumped and why."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{int(time.time() * 1000) % 1000:03d}"
    out = out_dir / f"{stamp}.txt"
    notes = []
    parts = []
    for pid in pids:
        if not handles_sigusr1(pid):
            notes.append(f"pid {pid}: no stack handler (not a Python process of this run); not signalled")
            continue
        try:
            with open(stack_file, "a") as f:
                start = f.tell()
                f.write(f"=== mpwatch stack dump: pid {pid} at {time.strftime('%H:%M:%S')} {label}\n")
                header_end = f.tell()
            os.kill(pid, signal.SIGUSR1)
        except OSError as exc:
            notes.append(f"pid {pid}: {exc.strerror}")
            continue
        end = _wait_settled(Path(stack_file), header_end)
        with open(stack_file, "rb") as f:
            f.seek(start)
            chunk = f.read(end - start).decode("utf-8", errors="replace")
        if end == header_end:
            chunk += "(no output: the process did not answer; it may be stopped or in a kernel wait)\n"
            notes.append(f"pid {pid}: no output")
        parts.append(chunk)
    text = "".join(parts) + "".join(f"# {n}\n" for n in notes)
    out.write_text(text or "# nothing could be dumped\n")
    return out, notes
