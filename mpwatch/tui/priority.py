"""The TUI's own priority. It shares the machine with the run it watches, and beside hundreds of
busy workers a key waits for a CPU longer than it takes to handle (a key 187 ms, `p` 379 ms
at 256 workers on 2 cores). Where the system lets it (root, or an RLIMIT_NICE that allows it),
the TUI's threads run at nice NICE, and its session's scheduling group too where the kernel
groups by session (sched_autogroup: each worker leads a session, so a thread's nice alone
would weigh nothing against 256 groups): its wake-ups run first. It costs the run nothing it
would have had: the TUI holds itself to a tenth of a core (tui.poller.CPU_BUDGET). Where it
cannot, it runs as it was started.

Called once the TUI is up in a terminal (never under a test's headless app: the test's own
process would keep it), after the supervisor it launched has started (that one keeps its own).
"""
from __future__ import annotations

import os
from pathlib import Path

NICE = -5
AUTOGROUP = "/proc/self/autogroup"


def raise_own() -> int | None:
    """Every thread of this process (and its scheduling group) at NICE; the group's nice before
    (for `restore`), or None where it was not changed."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) > NICE:
                os.setpriority(os.PRIO_PROCESS, tid, NICE)
        except OSError:  # not allowed here: as started
            return None
    return _set_group(NICE)


def restore(before: int | None) -> None:
    """The session's scheduling group as it was (the shell the TUI ran in keeps its own priority)."""
    if before is not None:
        _set_group(before)


def _set_group(nice: int) -> int | None:
    """The session's autogroup at `nice`: its nice before, or None (none here, or not allowed)."""
    try:
        with open(AUTOGROUP, encoding="ascii") as f:
            before = int(f.read().split("nice")[1])
        if before == nice:
            return None
        Path(AUTOGROUP).write_text(str(nice), encoding="ascii")  # a file of the kernel's, no widget
        return before
    except (OSError, ValueError, IndexError):  # no autogroups, or not allowed
        return None
