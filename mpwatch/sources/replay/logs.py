"""A rank's log as it stood at a moment of the run.

Logs keep every byte across restarts, with no time on their lines; what marks time in them
is the line the supervisor writes before each start but the first (rundir.writer.RunStore.mark_logs:
"--- mpwatch: rank 3 restarted at 12:00:01 ---"). So the log of a moment is the log up to
the end of the attempt that ran then: its lines, and those of the attempts before. Logs can
be huge: the markers are found by a search of the mapped file (cached while it does not
change) and only the tail that is shown is read. Called under the replay source's lock.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

from mpwatch.rundir import layout
from mpwatch.rundir.textfiles import open_regular, tail_lines

MARKER = ("\n" + layout.LOG_MARK).encode()
TAIL_BYTES = 64 * 1024


class AttemptLogs:
    def __init__(self) -> None:
        self._marks: dict[Path, tuple[int, float, list[int]]] = {}  # path -> (size, mtime, marker offsets)

    def _markers(self, path: Path) -> tuple[int, list[int]]:
        """The file's size and where each marker line starts (after its newline)."""
        try:
            st = os.stat(path)
        except OSError:
            return 0, []
        got = self._marks.get(path)
        if got is not None and got[0] == st.st_size and got[1] == st.st_mtime:
            return got[0], got[2]
        offsets: list[int] = []
        if st.st_size:
            try:
                with open_regular(path) as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    i = mm.find(MARKER)
                    while i >= 0:
                        offsets.append(i + 1)
                        i = mm.find(MARKER, i + 1)
            except (OSError, ValueError):
                return 0, []
        self._marks[path] = (st.st_size, st.st_mtime, offsets)
        return st.st_size, offsets

    def tail(self, path: Path, attempt: int | None, lines: int) -> list[str]:
        """The last `lines` lines written up to the end of attempt `attempt` (0: the first
        start; None: the whole log), made printable."""
        size, marks = self._markers(path)
        end = size if attempt is None or attempt >= len(marks) else marks[attempt]
        if end <= 0:
            return []
        return tail_lines(path, lines, TAIL_BYTES, end=end) if lines else []
