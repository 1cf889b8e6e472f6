"""Which run a command without --run means, when several are live: a read-only `ctl` command
(READ_ONLY: status, logs) takes the newest and says so on stderr; every other one changes the
run (pause, checkpoint, set, stop, ... and any command added later) and refuses, with exit code
2 and the list of live runs, rather than act on whichever happened to start last; `attach`
asks (tui.picker). Pure text here and a look at the registry; main thread."""
from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Sequence

from mpwatch.rundir import registry
from mpwatch.text import fmt

# the ctl actions that only read the run: the one list (an action not named here changes the
# run, so it refuses among several live runs; a new action is safe until it is added here)
READ_ONLY = frozenset({"status", "logs"})


def when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def runs_table(entries: Sequence[registry.RegistryEntry]) -> list[str]:
    """One line a live run: its id, script, start and directory (newest first)."""
    width = max([len(e["run_id"]) for e in entries] + [3])
    script_w = max([len(e["script"]) for e in entries] + [6])
    out = [f"  {'RUN':{width}}  {'SCRIPT':{script_w}}  {'STARTED':19}  DIRECTORY"]
    out += [f"  {e['run_id']:{width}}  {e['script']:{script_w}}  {when(e['started']):19}  {e['run_dir']}"
            for e in entries]
    return out


Fits = Callable[[registry.RegistryEntry], bool]  # the command would work on that run


def example(entries: Sequence[registry.RegistryEntry], argv: Sequence[str] | None, fits: Fits | None,
            unfit: str) -> str:
    """How to say which: the command as typed with --run, naming the newest run it fits (a `set`:
    one that declares the tunable; issue 40: the example named a run that declares none); where
    it fits none of them, that instead of an example."""
    chosen = next((e for e in entries if fits(e)), None) if fits is not None else entries[0]
    if chosen is None:
        return f"with --run RUN ({unfit})"
    said = " ".join(shlex.quote(a) for a in argv) if argv else "..."
    return f"with --run RUN (e.g. mpwatch ctl --run {chosen['run_id']} {said})"


def refusal(entries: Sequence[registry.RegistryEntry], action: str, where: str = "",
            how: str | None = None) -> str:
    """The error of an acting command without --run among several live runs: what to do, and the list."""
    how = how or example(entries, None, None, "")
    head = f"mpwatch: error: {len(entries)} live runs{where}: say which one to {action} {how}"
    return "\n".join([head, *runs_table(entries)])


def newest_note(entries: Sequence[registry.RegistryEntry], where: str = "") -> str:
    """The stderr line of a read-only command that took the newest of several live runs."""
    e = entries[0]
    others = ", ".join(x["run_id"] for x in entries[1:])
    return (f"mpwatch: {len(entries)} live runs{where}; this is the newest, {e['run_id']} "
            f"({e['script']}, started {fmt.duration(max(0.0, time.time() - e['started']))} ago); "
            f"--run picks another ({others})")


class SeveralRuns(Exception):
    """An acting command without --run among several live runs: its text is what to print."""


def choose(action: str, entries: Sequence[registry.RegistryEntry], where: str = "",
           argv: Sequence[str] | None = None, fits: Fits | None = None, unfit: str = "") -> str | None:
    """For a command given no --run: the run to use (its id; None when there is no live run:
    the command says so itself). Raises SeveralRuns for a command that changes the run among several live
    runs (any action not in READ_ONLY), its example the command as typed (`argv`) on a run it
    `fits`; a read-only one takes the newest and says so on stderr."""
    if len(entries) <= 1:
        return entries[0]["run_id"] if entries else None
    if action not in READ_ONLY:
        raise SeveralRuns(refusal(entries, action, where, example(entries, argv, fits, unfit)))
    print(newest_note(entries, where), file=sys.stderr)
    return entries[0]["run_id"]
