"""The command line's parsers and argument types: every bad value is a UsageError, which
main() prints as one line with exit code 2 (argparse's own exit is never reached).
Imported by `mpwatch --help`: argparse and nothing heavy."""
from __future__ import annotations

import argparse
import math
import sys
from typing import Literal, NoReturn

ACTIONS = ("pause", "resume", "kill", "restart", "dump")

EPILOG = """\
other commands:
  mpwatch ls [--json] [--all [DIR...]]    live runs of this user; --all: finished ones too
  mpwatch attach [RUN]                    open the TUI on a live run (default: the newest)
  mpwatch show [RUN]                      the TUI on a run's files, live or finished: step through it
  mpwatch summary RUN [--json]            what a run came to: how it ended, failures, stalls, GPU peaks
  mpwatch prune [--keep N] [--older-than DAYS] [--dry-run] [DIR...]
                                          remove old finished run directories
  mpwatch ctl [--run RUN] status [--json]
  mpwatch ctl [--run RUN] pause|resume|kill|restart|dump RANK|all
  mpwatch ctl [--run RUN] resize N
  mpwatch ctl [--run RUN] stop            stop every worker and end the run
  mpwatch ctl [--run RUN] logs RANK [--stderr] [--lines N] [--follow]
RUN is a run id (see 'mpwatch ls --all') or a run directory.
"""


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def die(msg: str, code: int = 2) -> int:
    print(f"mpwatch: error: {msg}", file=sys.stderr)
    return code


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    v = _whole(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def count(text: str) -> int:
    v = _whole(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def seconds(text: str, allow_zero: bool = False) -> float:
    v = _number(text, "seconds")
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise argparse.ArgumentTypeError(f"must be a {'non-negative' if allow_zero else 'positive'} "
                                         f"number of seconds, got {text}")
    return v


def seconds_or_zero(text: str) -> float:
    return seconds(text, allow_zero=True)


def days(text: str) -> float:
    v = _number(text, "a number of days")
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number of days, got {text}")
    return v


def rank_target(text: str) -> int | Literal["all"]:
    if text == "all":
        return "all"
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rank number or 'all', got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"a rank is not negative, got {v}")
    return v


def rank(text: str) -> int:
    v = rank_target(text)
    if v == "all":
        raise argparse.ArgumentTypeError("logs are read one rank at a time, not 'all'")
    return v


def run_parser() -> Parser:
    p = Parser(prog="mpwatch", usage="mpwatch [options] SCRIPT [ARGS...]\n"
                                     "       mpwatch ls|attach|summary|prune|ctl ...",
               description="Launch and watch the worker processes of a PyTorch training script.",
               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nprocs", type=positive_int, default=None,
                   help="number of workers (default: visible NVIDIA GPUs, or 2 without any)")
    p.add_argument("--headless", action="store_true", help="no TUI: status lines on stderr")
    p.add_argument("--run-dir", metavar="DIR", help="run directory (default ./mpwatch-runs/<time>-<script>/)")
    p.add_argument("--max-restarts", type=count, default=0, metavar="K",
                   help="restart a worker that exits non-zero up to K times (default 0)")
    p.add_argument("--stall-timeout", type=seconds, default=60.0, metavar="SECONDS",
                   help="a reporting worker silent this long is stalled (default 60)")
    p.add_argument("--grace", type=seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="time between SIGTERM and SIGKILL when stopping a worker (default 10)")
    p.add_argument("--resize-mode", choices=("restart", "independent"), default="restart",
                   help="restart: stop all and start N (collectives); independent: add/remove ranks")
    p.add_argument("--gpu-interval", type=seconds, default=1.0, metavar="SECONDS",
                   help="GPU memory/utilization sampling interval (default 1)")
    p.add_argument("--no-mouse", action="store_true", help="TUI: do not capture the mouse")
    p.add_argument("--supervise-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-id", help=argparse.SUPPRESS)
    p.add_argument("script", metavar="SCRIPT", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return p


def ctl_parser() -> Parser:
    p = Parser(prog="mpwatch ctl", description="Control a live run; read any run's logs.")
    p.add_argument("--run", metavar="RUN", help="run id or directory (default: the newest live run)")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    sub.required = True
    st = sub.add_parser("status", help="workers' state")
    st.add_argument("--json", action="store_true")
    for a in ACTIONS:
        sp = sub.add_parser(a, help=f"{a} a rank or all")
        sp.add_argument("target", type=rank_target, metavar="RANK|all")
    rs = sub.add_parser("resize", help="change the number of workers")
    rs.add_argument("n", type=positive_int, metavar="N")
    sub.add_parser("stop", help="stop every worker and end the run")
    lg = sub.add_parser("logs", help="a rank's stdout (or stderr) from the run directory; finished runs too")
    lg.add_argument("rank", type=rank, metavar="RANK")
    lg.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    lg.add_argument("--lines", type=count, default=50, metavar="N", help="the last N lines (default 50)")
    lg.add_argument("--follow", "-f", action="store_true", help="then print new lines until the run ends")
    return p
