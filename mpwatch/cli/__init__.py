"""mpwatch RUN | attach | show | ls | summary | prune | ctl | bridge: the command line's entry point.

main() dispatches to one module per job and keeps the rules every command shares: the
MPWATCH_* switches are read once, here (settings.Settings), and handed to the command; a
bad input (a flag, a switch) ends in one line on stderr and exit code 2; output into a
pipe that closed (`| head`) ends quietly. Imports stay lazy: `mpwatch --help` and `mpwatch ctl`
start fast and never load torch or textual; the supervisor is imported only to run one,
the TUI only to show one. Runs on the main thread of the `mpwatch` process.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence

from mpwatch.cli.args import UsageError, die, run_parser
from mpwatch.cli.ctl_args import ctl_parser
from mpwatch.settings import Settings, SettingsError

__all__ = ["UsageError", "ctl_parser", "main", "run_parser"]

# subcommand -> "module:function"; each function takes the arguments after the subcommand
# and the settings
SUBCOMMANDS = {
    "ls": "mpwatch.cli.listing:cmd_ls",
    "attach": "mpwatch.cli.live:cmd_attach",
    "ctl": "mpwatch.cli.live:cmd_ctl",
    "summary": "mpwatch.cli.summary:cmd_summary",
    "show": "mpwatch.cli.show:cmd_show",
    "prune": "mpwatch.cli.prune:cmd_prune",
    "bridge": "mpwatch.cli.bridge:cmd_bridge",
}

SIGPIPE_EXIT = 141  # what a shell shows for a process ended by SIGPIPE, as `yes | head` does


def _command(argv: list[str]) -> Callable[[Settings], int]:
    if argv and argv[0] in SUBCOMMANDS:
        modname, fname = SUBCOMMANDS[argv[0]].split(":")
        fn: Callable[[list[str], Settings], int] = getattr(importlib.import_module(modname), fname)
        rest = argv[1:]
        return lambda settings: fn(rest, settings)
    ns = run_parser().parse_args(argv)  # a bad command line is said before a bad switch
    from mpwatch.cli.launch import cmd_run

    return lambda settings: cmd_run(ns, settings)


def _silence_stdout() -> None:
    """The reader of stdout is gone: point stdout at /dev/null so that nothing written
    later (the interpreter's last flush included) raises again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (tests' StringIO)
        pass


def _run(args: list[str]) -> int:
    try:
        command = _command(args)
        code = command(Settings.from_env())
    except (UsageError, SettingsError) as exc:
        code = die(str(exc))
    except KeyboardInterrupt:
        code = 130
    except SystemExit:  # argparse's --help ends so: its text must reach the pipe first
        sys.stdout.flush()
        raise
    sys.stdout.flush()  # a closed pipe shows here when the output was small
    return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        _silence_stdout()
        return SIGPIPE_EXIT
