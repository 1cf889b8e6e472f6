"""The command line's parsers and argument types: every bad value is a UsageError, which
main() prints as one line with exit code 2 (argparse's own exit is never reached).
Imported by `mpwatch --help`: argparse and nothing heavy."""
from __future__ import annotations

import argparse
import math
import sys
import textwrap
from typing import Any, Literal, NoReturn, Protocol

from mpwatch.rundir import layout
from mpwatch.supervisor.options import machine_cap
from mpwatch.text.safe import printable
from mpwatch.text.safe import text as safe_text

ERROR_WIDTH = 2000  # an error line is cut past this (a path or a cause can be long, never a screenful)

ACTIONS = ("pause", "resume", "kill", "restart", "dump")
NPROC_WORDS = ("auto", "cpu", "gpu")

# torchrun flags (each takes a value) that have no counterpart here: accepted, and said so once.
NO_EFFECT: tuple[tuple[str, ...], ...] = (
    ("--monitor-interval",), ("--start-method",), ("--event-log-handler",), ("-r", "--redirects"),
    ("-t", "--tee"), ("--log-line-prefix-template",), ("--local-ranks-filter",),
    ("--duplicate-stdout-filters",), ("--duplicate-stderr-filters",), ("--logs-specs",), ("--numa-binding",),
    ("--signals-to-handle",),
)
# dest -> torchrun's environment variable for its default
PET = (("nprocs", "PET_NPROC_PER_NODE"), ("nnodes", "PET_NNODES"), ("node_rank", "PET_NODE_RANK"),
       ("master_addr", "PET_MASTER_ADDR"), ("master_port", "PET_MASTER_PORT"),
       ("rdzv_backend", "PET_RDZV_BACKEND"), ("rdzv_endpoint", "PET_RDZV_ENDPOINT"),
       ("rdzv_id", "PET_RDZV_ID"), ("rdzv_conf", "PET_RDZV_CONF"), ("local_addr", "PET_LOCAL_ADDR"),
       ("max_restarts", "PET_MAX_RESTARTS"), ("role", "PET_ROLE"), ("log_dir", "PET_LOG_DIR"),
       ("standalone", "PET_STANDALONE"), ("module", "PET_MODULE"), ("no_python", "PET_NO_PYTHON"),
       ("run_path", "PET_RUN_PATH"), ("shutdown_timeout", "PET_SHUTDOWN_TIMEOUT"),
       ("virtual_local_rank", "PET_VIRTUAL_LOCAL_RANK"))
PET_SWITCHES = frozenset({"standalone", "module", "no_python", "run_path", "virtual_local_rank"})
NO_EFFECT_WHY = ("mpwatch watches every worker itself and keeps each rank's whole output in its run "
                 "directory (rank-N/stdout.log, stderr.log)")

EPILOG = """\
other commands:
  mpwatch ls [--json] [--all [DIR...]]    live runs of this user; --all: finished ones too
  mpwatch attach [RUN]                    open the TUI on a live run (default: the newest)
  mpwatch attach HOST:RUN [HOST:RUN...]   runs on other machines over ssh (ctl --host, ls --host too)
  mpwatch show [RUN]                      the TUI on a run's files, live or finished: step through it
  mpwatch summary RUN [--json]            what a run came to: how it ended, failures, stalls, GPU peaks
  mpwatch prune [--keep N] [--older-than DAYS] [--dry-run] [DIR...]
                                          remove old finished run directories
  mpwatch ctl [--run RUN] status [--json]
  mpwatch ctl [--run RUN] pause|resume|kill|restart|dump RANK|all
  mpwatch ctl [--run RUN] resize N
  mpwatch ctl [--run RUN] stop            stop every worker and end the run
  mpwatch ctl [--run RUN] checkpoint RANK|all [--at-step S]
                                          mpwatch.should_checkpoint() is True once, at one step
  mpwatch ctl [--run RUN] set NAME VALUE [--at-step S]
                                          change mpwatch.tunable(NAME) on every rank at one step
  mpwatch ctl [--run RUN] logs RANK [--stderr] [--lines N] [--follow]
RUN is a run id (see 'mpwatch ls --all') or a run directory.
"""


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        # ARGS (the script's own arguments, argparse.REMAINDER) is never required, though
        # argparse lists it with SCRIPT when neither is given.
        raise UsageError(message.replace("required: SCRIPT, ARGS", "required: SCRIPT"))


def die(msg: str, code: int = 2) -> int:
    print(f"mpwatch: error: {printable(msg, ERROR_WIDTH)}", file=sys.stderr)
    return code


def say(line: str) -> None:
    """A line of a command's output, made printable (text.safe: the one sanitiser)."""
    print(safe_text(line))


def note(msg: str) -> None:
    """A line on stderr about something a command skipped; it goes on."""
    print(f"mpwatch: note: {printable(msg, ERROR_WIDTH)}", file=sys.stderr)


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def dir_id(text: str) -> tuple[int, int]:
    """DEV:INODE: the run directory a launcher made (rundir.writer.open_run_dir checks it)."""
    dev, _, ino = text.partition(":")
    try:
        return int(dev), int(ino)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected DEV:INODE, got {text!r}") from None


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


def nproc(text: str) -> int | str:
    """torchrun's --nproc-per-node: a number, or auto | cpu | gpu (resolved by the launcher)."""
    return text if text in NPROC_WORDS else positive_int(text)


def nnodes(text: str) -> tuple[int, int]:
    """torchrun's --nnodes: N or MIN:MAX."""
    parts = text.split(":")
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"expected N or MIN:MAX, got {text!r}")
    lo, hi = positive_int(parts[0]), positive_int(parts[-1])
    if lo > hi:
        raise argparse.ArgumentTypeError(f"MIN is above MAX in {text!r}")
    return lo, hi


def port(text: str) -> int:
    v = _whole(text)
    if not 0 < v < 65536:
        raise argparse.ArgumentTypeError(f"a port is from 1 to 65535, got {v}")
    return v


# Signals --stop-signal refuses: they cannot be caught (KILL, STOP), do not stop (CONT, CHLD...),
# or are mpwatch's own in the workers (USR1: the stack dumps' faulthandler).
NOT_STOP_SIGNALS = {"SIGKILL": "it cannot be caught: the grace period would be lost",
                    "SIGSTOP": "it cannot be caught", "SIGCONT": "it does not stop a process",
                    "SIGCHLD": "it does not stop a process", "SIGWINCH": "it does not stop a process",
                    "SIGURG": "it does not stop a process",
                    "SIGUSR1": "mpwatch's stack dumps use it in every worker; USR2 is free"}


def stop_signal(text: str) -> str:
    """--stop-signal: a signal's name (TERM, SIGUSR2) or number, as its full name."""
    import signal

    word = text.strip().upper()
    try:
        sig = signal.Signals(int(word)) if word.isdigit() else signal.Signals[word if word.startswith("SIG")
                                                                              else "SIG" + word]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"not a signal: {text!r} (TERM, INT, USR2, HUP, ...)") from None
    if sig.name in NOT_STOP_SIGNALS:
        raise argparse.ArgumentTypeError(f"{sig.name}: {NOT_STOP_SIGNALS[sig.name]}")
    return sig.name


def conf(text: str) -> dict[str, str]:
    """torchrun's --rdzv-conf: key=value,key=value."""
    out: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise argparse.ArgumentTypeError(f"expected key=value pairs separated by commas, got {item!r}")
        out[key.strip()] = value.strip()
    return out


class _Flags(Protocol):
    """A parser or one of its argument groups."""

    def add_argument(self, *names: str, **kw: Any) -> argparse.Action: ...


def _add(group: _Flags, *names: str, **kw: Any) -> None:
    """A flag as torchrun spells it: with dashes (shown in --help) and with underscores
    (accepted, not shown: the same dest, no default of its own)."""
    group.add_argument(*names, **kw)
    hidden = ["--" + n[2:].replace("-", "_") for n in names if n.startswith("--") and "-" in n[2:]]
    if hidden:
        kw.pop("metavar", None)
        group.add_argument(*hidden, **{**kw, "dest": kw.get("dest") or names[-1][2:].replace("-", "_"),
                                      "default": argparse.SUPPRESS, "help": argparse.SUPPRESS})


def run_parser() -> Parser:
    p = Parser(prog="mpwatch", usage="mpwatch [options] SCRIPT [ARGS...]\n"
                                     "       mpwatch ls|attach|summary|prune|ctl ...",
               description="Launch and watch the worker processes of a PyTorch training script.\n"
                           "torchrun's command lines work unchanged with torchrun replaced by mpwatch.",
               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add(p, "-n", "--nprocs", "--nproc-per-node", dest="nprocs", type=nproc, default=None,
                   metavar="N", help="workers on this node: a number, auto, cpu or gpu "
                                     "(default: visible NVIDIA GPUs, or 2 without any); at most "
                                     f"{machine_cap()} here, the larger of 64 and 4 per CPU or GPU, as "
                                     "for resize (MPWATCH_MAX_WORKERS sets another bound)")
    p.add_argument("--headless", action="store_true", help="no TUI: status lines on stderr")
    p.add_argument("--run-dir", metavar="DIR",
                   help=f"run directory (default ./{layout.RUNS_FOLDER}/<time>-<script>-<random>/); "
                        "made when missing, else it must be empty")
    _add(p, "--max-restarts", type=count, default=0, metavar="K",
                   help="restart a worker that exits non-zero up to K times (default 0); on several nodes "
                        "with c10d: K new rounds of every node's workers")
    p.add_argument("--stall-timeout", type=seconds, default=60.0, metavar="SECONDS",
                   help="a worker silent this long after a report is stalled; the clock starts at its "
                        "first report (default 60)")
    p.add_argument("--startup-timeout", type=seconds, default=600.0, metavar="SECONDS",
                   help="a worker that imported mpwatch and has not reported this long after its start is "
                        "a slow start: said once, its stacks dumped once; never stalled (default 600)")
    p.add_argument("--grace", type=seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="time between the stop signal and SIGKILL when stopping a worker (default 10)")
    p.add_argument("--stop-signal", type=stop_signal, default="SIGTERM", metavar="SIG",
                   help="what a worker's own process gets first when it is stopped, so that a handler "
                        "can save before its children die (default TERM; then SIGKILL to all of the rank "
                        "after --grace)")
    p.add_argument("--metrics-port", type=port, default=None, metavar="PORT",
                   help="serve Prometheus metrics (and /healthz) on PORT (or MPWATCH_METRICS_PORT)")
    p.add_argument("--metrics-addr", default=None, metavar="ADDR",
                   help="the address --metrics-port listens on (default 127.0.0.1: this machine only, "
                        "where any user may read the page: steps, losses, the script's name)")
    p.add_argument("--resize-mode", choices=("restart", "independent"), default="restart",
                   help="restart: stop all and start N (collectives); independent: add/remove ranks")
    p.add_argument("--gpu-interval", type=seconds, default=1.0, metavar="SECONDS",
                   help="GPU memory/utilization sampling interval (default 1)")
    p.add_argument("--no-mouse", action="store_true", help="TUI: do not capture the mouse")
    p.add_argument("--no-auto", action="store_true",
                   help="no automatic steps, losses and time split (what scripts that import torch and never "
                        "call mpwatch.report() get; also MPWATCH_AUTO=0)")
    p.add_argument("--supervise-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-id", help=argparse.SUPPRESS)
    p.add_argument("--made-run-dir", type=dir_id, help=argparse.SUPPRESS)  # DEV:INODE (cli.tui_launch)
    _torchrun_flags(p)
    p.add_argument("script", metavar="SCRIPT", help="the training script (a module with -m, "
                                                    "an executable with --no-python)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    _pet_defaults(p)
    return p


def _torchrun_flags(p: Parser) -> None:
    g = p.add_argument_group("how to run the script (torchrun's flags)")
    _add(g, "-m", "--module", action="store_true",
                   help="SCRIPT is a module, run as python -m MODULE")
    _add(g, "--no-python", action="store_true", help="SCRIPT is an executable, run as it is")
    _add(g, "--run-path", action="store_true", help="run SCRIPT with python (workers are "
                                                                    "always processes of their own)")
    g.add_argument("--role", default="default", help="ROLE_NAME of the workers (default: default)")
    _add(g, "--log-dir", metavar="DIR", help="a run directory under DIR (unless --run-dir)")
    _add(g, "--shutdown-timeout", type=seconds_or_zero, metavar="SECONDS",
                   help="the same as --grace")
    _add(g, "--virtual-local-rank", action="store_true",
                   help="LOCAL_RANK=0 for every worker, each seeing only its own GPU")
    n = p.add_argument_group("several nodes (torchrun's flags; under srun, Slurm fills them in)")
    n.add_argument("--nnodes", type=nnodes, default=None, metavar="N|MIN:MAX", help="nodes (default 1)")
    _add(n, "--node-rank", type=count, default=None, metavar="R",
                   help="this node's rank (static rendezvous; default 0)")
    _add(n, "--master-addr", default=None, metavar="HOST",
                   help="node 0's address (static; default 127.0.0.1)")
    _add(n, "--master-port", type=port, default=None, metavar="PORT",
                   help="node 0's rendezvous port (static; default 29500)")
    _add(n, "--rdzv-backend", default=None, metavar="static|c10d",
                   help="torch's rendezvous: static (node ranks given) or c10d (ranks assigned, restart "
                        "rounds across nodes); default static")
    _add(n, "--rdzv-endpoint", default=None, metavar="HOST:PORT", help="the rendezvous store")
    _add(n, "--rdzv-id", default=None, metavar="ID", help="the run's name in the rendezvous")
    _add(n, "--rdzv-conf", type=conf, default=None, metavar="K=V,...",
                   help="torch's rendezvous settings (join_timeout, read_timeout, is_host, ...)")
    _add(n, "--local-addr", default=None, metavar="HOST", help="this node's address")
    n.add_argument("--standalone", action="store_true", help="one node, its own rendezvous (the default)")
    x = p.add_argument_group("accepted from torchrun command lines, no effect here", textwrap.fill(
        ", ".join(names[-1] for names in NO_EFFECT) + ": " + NO_EFFECT_WHY, 78, initial_indent="  ",
        subsequent_indent="  "))
    for names in NO_EFFECT:
        _add(x, *names, dest=_dest(names), default=None, help=argparse.SUPPRESS)


def _dest(names: tuple[str, ...]) -> str:
    return "noop_" + names[-1].lstrip("-").replace("-", "_")


def no_effect(ns: argparse.Namespace) -> list[str]:
    """The flags given that mpwatch accepts without effect, as the user would spell them."""
    return [names[-1] for names in NO_EFFECT if getattr(ns, _dest(names)) is not None]


def _pet_defaults(p: Parser) -> None:
    """torchrun reads each flag's default from PET_<FLAG> (PET_NNODES=2, PET_NODE_RANK=1...):
    so does mpwatch, so that a torchrun environment works unchanged."""
    import os

    for dest, name in PET:
        value = os.environ.get(name)
        if value is None:
            continue
        if dest in PET_SWITCHES:
            p.set_defaults(**{dest: value.strip().lower() in ("1", "true", "yes")})
        else:
            p.set_defaults(**{dest: value})  # argparse converts a string default with the flag's type


# The flags a launcher passes on to a supervisor it starts in its own process (cli.tui_launch):
# (dest, flag); the others reach it resolved (-n, --grace, --run-dir) or are the launcher's own.
RELAYED = (("module", "-m"), ("no_python", "--no-python"), ("run_path", "--run-path"), ("role", "--role"),
           ("virtual_local_rank", "--virtual-local-rank"), ("nnodes", "--nnodes"),
           ("node_rank", "--node-rank"), ("master_addr", "--master-addr"), ("master_port", "--master-port"),
           ("rdzv_backend", "--rdzv-backend"), ("rdzv_endpoint", "--rdzv-endpoint"), ("rdzv_id", "--rdzv-id"),
           ("rdzv_conf", "--rdzv-conf"), ("local_addr", "--local-addr"), ("standalone", "--standalone"),
           ("no_auto", "--no-auto"))


def relayed_flags(ns: argparse.Namespace) -> list[str]:
    """The torchrun flags of `ns` as a command line (defaults left out)."""
    out: list[str] = []
    for dest, flag in RELAYED:
        value = getattr(ns, dest)
        if value is None or value is False or (dest == "role" and value == "default"):
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, tuple):
            out += [flag, f"{value[0]}:{value[1]}"]
        elif isinstance(value, dict):
            out += [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        else:
            out += [flag, str(value)]
    return out
