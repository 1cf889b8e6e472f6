"""The command line's parsers and argument types: every bad value is a UsageError, which
main() prints as one line with exit code 2 (argparse's own exit is never reached). The run
command's flags are declared once each (FLAGS: argparse's keywords, torchrun's PET_* variable,
whether a launcher relays it). Imported by `mpwatch --help`: argparse and nothing heavy."""
from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, Protocol

from mpwatch.contract import numtext
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
  mpwatch ctl [--run RUN] memory RANK|all [--at-step S]
                                          torch's CUDA allocator snapshot into rank-N/memory/
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
    v = numtext.int_of(text, signed=True)  # ASCII digits ("²" and "٣" are none), 18 at most
    if v is None:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {printable(text, 40)!r}")
    return v


def dir_id(text: str) -> tuple[int, int]:
    """DEV:INODE: the run directory a launcher made (rundir.writer.open_run_dir checks it)."""
    dev, _, ino = (numtext.int_of(w, 20) for w in text.partition(":"))
    if dev is None or ino is None:
        raise argparse.ArgumentTypeError(f"expected DEV:INODE, got {printable(text, 60)!r}")
    return dev, ino


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
    v = numtext.int_of(text, 9, signed=True)
    if v is None:
        raise argparse.ArgumentTypeError(f"expected a rank number or 'all', got {printable(text, 40)!r}")
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


def module_name(text: str) -> str:
    """--preload's MODULE: a dotted name of identifiers (pkg.mod)."""
    parts = text.split(".")
    if not text or len(text) > 200 or not all(p.isidentifier() for p in parts):
        raise argparse.ArgumentTypeError(f"not a module name: {text!r}")
    return text


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
        number = numtext.int_of(word, 3)  # ASCII digits alone: "²" is no signal's number
        sig = signal.Signals(number) if number is not None else signal.Signals[word if word.startswith("SIG")
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


@dataclass(frozen=True)
class Flag:
    """A flag of `mpwatch [options] SCRIPT`, declared once: its names (the one a launcher relays
    first, torchrun's own spelling last), argparse's keywords, and what argparse cannot say:
    - env: the variable torchrun reads the flag's default from (PET_NNODES=2...; the idea of
      torch.distributed.argparse_util's `env`): a torchrun environment works unchanged.
    - relay: a launcher passes it on to the supervisor it starts in its own process
      (cli.tui_launch); the others reach it resolved (-n, --grace, --run-dir) or are its own.
    - torchrun: torchrun's flag, accepted with underscores too (--node_rank), as torchrun does."""

    names: tuple[str, ...]
    kw: Mapping[str, Any]
    env: str | None = None
    relay: bool = False
    torchrun: bool = False

    @property
    def dest(self) -> str:
        return str(self.kw.get("dest") or self.names[-1].lstrip("-").replace("-", "_"))

    def add_to(self, group: _Flags, environ: Mapping[str, str]) -> None:
        kw = dict(self.kw)
        raw = environ.get(self.env) if self.env else None
        if raw is not None:  # argparse converts a string default with the flag's type
            switch = kw.get("action") == "store_true"
            kw["default"] = raw.strip().lower() in ("1", "true", "yes") if switch else raw
        group.add_argument(*self.names, **kw)
        hidden = ["--" + n[2:].replace("-", "_") for n in self.names if n.startswith("--") and "-" in n[2:]]
        if self.torchrun and hidden:  # the same dest, no default of its own, not shown
            kw.pop("metavar", None)
            group.add_argument(*hidden, **{**kw, "dest": self.dest, "default": argparse.SUPPRESS,
                                           "help": argparse.SUPPRESS})

    def relayed(self, value: object) -> list[str]:
        """The flag with `value` as a command line ([] for a default)."""
        if value is None or value is False or value == self.kw.get("default"):
            return []
        if value is True:
            return [self.names[0]]
        if isinstance(value, list):  # a repeatable flag: once each
            return [arg for item in value for arg in (self.names[0], str(item))]
        if isinstance(value, tuple):
            return [self.names[0], f"{value[0]}:{value[1]}"]
        if isinstance(value, dict):
            return [self.names[0], ",".join(f"{k}={v}" for k, v in value.items())]
        return [self.names[0], str(value)]


def _flag(*names: str, relay: bool = False, **kw: Any) -> Flag:
    return Flag(names, kw, None, relay)


def _torchrun(*names: str, relay: bool = False, **kw: Any) -> Flag:
    """A flag of torchrun's, read from its environment variable as torchrun reads it: PET_ and the
    flag's last name (--nproc-per-node: PET_NPROC_PER_NODE)."""
    return Flag(names, kw, "PET_" + names[-1].lstrip("-").upper().replace("-", "_"), relay, torchrun=True)


def _node(name: str, **kw: Any) -> Flag:
    """A torchrun flag of several nodes: relayed to every node's supervisor, None when not given."""
    return _torchrun(name, relay=True, default=None, **kw)


RUN_FLAGS = (
    _torchrun("-n", "--nprocs", "--nproc-per-node", dest="nprocs", type=nproc,
              default=None, metavar="N", help="workers on this node: a number, auto, cpu or gpu (default: "
                                              "visible NVIDIA GPUs, or 2 without any); at most "
                                              f"{machine_cap()} here, the larger of 64 and 4 per CPU or GPU, "
                                              "as for resize (MPWATCH_MAX_WORKERS sets another bound)"),
    _flag("--headless", action="store_true", help="no TUI: status lines on stderr"),
    _flag("--run-dir", metavar="DIR", help=f"run directory (default ./{layout.RUNS_FOLDER}/<time>-<script>-"
                                           "<random>/); made when missing, else it must be empty"),
    _torchrun("--max-restarts", type=count, default=0, metavar="K",
              help="restart a worker that exits non-zero up to K times (default 0); on several nodes with "
                   "c10d: K new rounds of every node's workers"),
    _flag("--stall-timeout", type=seconds, default=60.0, metavar="SECONDS",
          help="a worker silent this long after a report is stalled; the clock starts at its first report "
               "(default 60)"),
    _flag("--startup-timeout", type=seconds, default=600.0, metavar="SECONDS",
          help="a worker that imported mpwatch and has not reported this long after its start is a slow "
               "start: said once, its stacks dumped once; never stalled (default 600)"),
    _flag("--grace", type=seconds_or_zero, default=10.0, metavar="SECONDS",
          help="time between the stop signal and SIGKILL when stopping a worker (default 10)"),
    _flag("--stop-signal", type=stop_signal, default="SIGTERM", metavar="SIG",
          help="what a worker's own process gets first when it is stopped, so that a handler can save "
               "before its children die (default TERM; then SIGKILL to all of the rank after --grace)"),
    _flag("--metrics-port", type=port, default=None, metavar="PORT",
          help="serve Prometheus metrics (and /healthz) on PORT (or MPWATCH_METRICS_PORT)"),
    _flag("--metrics-addr", default=None, metavar="ADDR",
          help="the address --metrics-port listens on (default 127.0.0.1: this machine only, where any "
               "user may read the page: steps, losses, the script's name)"),
    _flag("--resize-mode", choices=("restart", "independent"), default="restart",
          help="restart: stop all and start N (collectives); independent: add/remove ranks"),
    _flag("--gpu-interval", type=seconds, default=1.0, metavar="SECONDS",
          help="GPU memory/utilization sampling interval (default 1)"),
    _flag("--no-mouse", action="store_true", help="TUI: do not capture the mouse"),
    _flag("--no-auto", relay=True, action="store_true",
          help="no automatic steps, losses and time split (what scripts that import torch and never call "
               "mpwatch.report() get; also MPWATCH_AUTO=0)"),
    _flag("--cuda-memory-history", relay=True, action="store_true",
          help="each rank records the stack of every CUDA allocation from its start (torch's memory "
               "history), so an OOM's snapshot and ctl memory's say who allocated each block; it costs a "
               "few microseconds an allocation and a few KB of host memory an entry kept "
               "(MPWATCH_CUDA_HISTORY_ENTRIES)"),
    _flag("--preload", relay=True, action="append", type=module_name, default=None, metavar="MODULE",
          help="import MODULE once, in the process that forks every worker (repeatable); torch is preloaded "
               "when the script imports it"),
    _flag("--no-preload", relay=True, action="store_true",
          help="start every worker by exec, each importing torch itself (no forkserver)"),
    _flag("--supervise-only", action="store_true", help=argparse.SUPPRESS),
    _flag("--run-id", help=argparse.SUPPRESS),
    _flag("--made-run-dir", type=dir_id, help=argparse.SUPPRESS),  # DEV:INODE (cli.tui_launch)
)
HOW_FLAGS = (
    _torchrun("-m", "--module", relay=True, action="store_true",
              help="SCRIPT is a module, run as python -m MODULE"),
    _torchrun("--no-python", relay=True, action="store_true", help="SCRIPT is an executable, run as it is"),
    _torchrun("--run-path", relay=True, action="store_true",
              help="run SCRIPT with python (workers are always processes of their own)"),
    _torchrun("--role", relay=True, default="default", help="ROLE_NAME of the workers (default: default)"),
    _torchrun("--log-dir", metavar="DIR", help="a run directory under DIR (unless --run-dir)"),
    _torchrun("--shutdown-timeout", type=seconds_or_zero, metavar="SECONDS", help="the same as --grace"),
    _torchrun("--virtual-local-rank", relay=True, action="store_true",
              help="LOCAL_RANK=0 for every worker, each seeing only its own GPU"),
)
NODE_FLAGS = (
    _node("--nnodes", type=nnodes, metavar="N|MIN:MAX", help="nodes (default 1)"),
    _node("--node-rank", type=count, metavar="R", help="this node's rank (static rendezvous; default 0)"),
    _node("--master-addr", metavar="HOST", help="node 0's address (static; default 127.0.0.1)"),
    _node("--master-port", type=port, metavar="PORT",
          help="node 0's rendezvous port (static; default 29500)"),
    _node("--rdzv-backend", metavar="static|c10d",
          help="torch's rendezvous: static (node ranks given) or c10d (ranks assigned, restart rounds across "
               "nodes); default static"),
    _node("--rdzv-endpoint", metavar="HOST:PORT", help="the rendezvous store"),
    _node("--rdzv-id", metavar="ID", help="the run's name in the rendezvous"),
    _node("--rdzv-conf", type=conf, metavar="K=V,...",
          help="torch's rendezvous settings (join_timeout, read_timeout, is_host, ...)"),
    _node("--local-addr", metavar="HOST", help="this node's address"),
    _torchrun("--standalone", relay=True, action="store_true",
              help="one node, its own rendezvous (the default)"),
)
FLAGS = RUN_FLAGS + HOW_FLAGS + NODE_FLAGS


def run_parser(environ: Mapping[str, str] | None = None) -> Parser:
    """`mpwatch [options] SCRIPT`: FLAGS, their PET_* defaults read from `environ` (default:
    this process's), the torchrun flags without effect, SCRIPT and its ARGS."""
    env = os.environ if environ is None else environ
    p = Parser(prog="mpwatch", usage="mpwatch [options] SCRIPT [ARGS...]\n"
                                     "       mpwatch ls|attach|summary|prune|ctl ...",
               description="Launch and watch the worker processes of a PyTorch training script.\n"
                           "torchrun's command lines work unchanged with torchrun replaced by mpwatch.",
               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in RUN_FLAGS:
        f.add_to(p, env)
    g = p.add_argument_group("how to run the script (torchrun's flags)")
    for f in HOW_FLAGS:
        f.add_to(g, env)
    n = p.add_argument_group("several nodes (torchrun's flags; under srun, Slurm fills them in)")
    for f in NODE_FLAGS:
        f.add_to(n, env)
    x = p.add_argument_group("accepted from torchrun command lines, no effect here", textwrap.fill(
        ", ".join(names[-1] for names in NO_EFFECT) + ": " + NO_EFFECT_WHY, 78, initial_indent="  ",
        subsequent_indent="  "))
    for names in NO_EFFECT:
        quiet = {"dest": _dest(names), "default": None, "help": argparse.SUPPRESS}
        Flag(names, quiet, torchrun=True).add_to(x, env)
    p.add_argument("script", metavar="SCRIPT", help="the training script (a module with -m, "
                                                    "an executable with --no-python)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return p


def relayed_flags(ns: argparse.Namespace) -> list[str]:
    """The relayed flags of `ns` as a command line (defaults left out)."""
    return [arg for f in FLAGS if f.relay for arg in f.relayed(getattr(ns, f.dest))]


def _dest(names: tuple[str, ...]) -> str:
    return "noop_" + names[-1].lstrip("-").replace("-", "_")


def no_effect(ns: argparse.Namespace) -> list[str]:
    """The flags given that mpwatch accepts without effect, as the user would spell them."""
    return [names[-1] for names in NO_EFFECT if getattr(ns, _dest(names)) is not None]
