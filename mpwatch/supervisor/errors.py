"""The supervisor's two kinds of error: a refusal, and a bug.

- `CommandError`: a control command the user asked for cannot be done (a rank that does not
  exist, a resize of a run on several nodes, an argument out of range). Its message is the
  reply, word for word; nothing is logged.
- A bug: any other exception a catch-all stops from ending the run (the control server, the
  control commands, the channel hub, the GPU watcher, the node thread, the dump threads, the
  process sampler). `bug()` writes its traceback to the run directory's supervisor.log (the
  stdlib logger "mpwatch.supervisor") and gives the one line for whoever asked:
  "internal error: KeyError: 'x' (see supervisor.log)". `note()` does the same at warning
  level for a failure that is no bug but whose traceback helps (a rendezvous store gone).

The same exception at the same place is written in full REPEATS times, then counted, and
the file takes at most RECORDS_MAX records: a poller tripping on every tick must not fill
the disk. supervisor.log is opened by supervisor.core.Run.setup (`attach`) with O_APPEND, so
a launcher that sends the supervisor's own output to the same file (cli.tui_launch) keeps
both, line by line; a headless run gets the file too. Any thread may log.
"""
from __future__ import annotations

import io
import logging
import os
import threading

from mpwatch.rundir import layout, writer

LOG = logging.getLogger("mpwatch.supervisor")
FILE_NAME = layout.SUPERVISOR_LOG
REPEATS = 3  # tracebacks written for one exception at one place
RECORDS_MAX = 2000  # records written by bug() and note() in a run, in all
BUG_LINE_MAX = 300  # characters of an exception a client reads
FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(message)s"


class CommandError(Exception):
    """A control command refused: the user asked for something impossible. The message is
    the one line the client shows."""


class _Budget:
    """How often each (place, exception type, raising line) was logged, under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[tuple[str, str, str], int] = {}
        self.records = 0

    def take(self, where: str, exc: BaseException) -> int:
        """The how-many-th time this is (0: the file's budget is spent, write nothing)."""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        line = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
        key = (where, type(exc).__name__, line)
        with self.lock:
            if self.records >= RECORDS_MAX:
                return 0
            self.records += 1
            n = self.seen[key] = self.seen.get(key, 0) + 1
            return n


_budget = _Budget()


def _log(level: int, where: str, exc: BaseException) -> None:
    n = _budget.take(where, exc)
    if n == 0:
        return
    if n <= REPEATS:
        LOG.log(level, "%s: %s: %s", where, type(exc).__name__, exc, exc_info=exc)
    elif n == REPEATS + 1 or n % 100 == 0:
        LOG.log(level, "%s: %s again (%d times; traceback above)", where, type(exc).__name__, n)


def bug(where: str, exc: BaseException) -> str:
    """A bug caught at `where`: its traceback to supervisor.log; the one line for the client."""
    _log(logging.ERROR, where, exc)
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")  # one line, cut: the log has it whole
    return f"internal error: {text if len(text) <= BUG_LINE_MAX else text[:BUG_LINE_MAX - 1] + '…'} " \
        "(see supervisor.log)"


def note(where: str, exc: BaseException) -> None:
    """An expected failure caught at `where` (no bug): its traceback to supervisor.log."""
    _log(logging.WARNING, where, exc)


def attach(store: writer.RunStore) -> logging.Handler | None:
    """Send the logger's records to run_dir/supervisor.log (created 0600, never through a
    symlink, appended to); None when it cannot be opened (the records then go to stderr)."""
    global _budget
    try:
        raw = store.open_supervisor_log()
    except OSError:
        return None
    handler = logging.StreamHandler(io.TextIOWrapper(raw, encoding="utf-8", errors="replace",
                                                     line_buffering=True))
    handler.setFormatter(logging.Formatter(FORMAT))
    _budget = _Budget()
    LOG.setLevel(logging.INFO)
    LOG.propagate = False  # the run's file, not the root logger's handlers (a host program's)
    LOG.addHandler(handler)
    return handler


def is_stderr(handler: logging.Handler | None) -> bool:
    """The log's file is this process's stderr too (cli.tui_launch starts its supervisor so): a line
    said on stderr is in supervisor.log already."""
    if not isinstance(handler, logging.StreamHandler):
        return False
    try:
        log, err = os.fstat(handler.stream.fileno()), os.fstat(2)
    except (OSError, ValueError, AttributeError):
        return False
    return (log.st_dev, log.st_ino) == (err.st_dev, err.st_ino)


def detach(handler: logging.Handler | None) -> None:
    if handler is not None:
        LOG.removeHandler(handler)
        handler.close()
