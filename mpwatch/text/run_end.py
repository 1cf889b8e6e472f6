"""How a run ended, in the same words everywhere: the TUI's banner and its status line, the
headless line and the events screen (the run_finished event), `mpwatch summary`, `mpwatch ls
--all` and the line after a TUI stopped its run. Pure; any thread.

'exit code 0'; 'exit code 1: rank 0: ValueError: x' (a rank's own exit code said only where it
is not the run's: 'exit code 1: rank 0 exit 3: ...'); 'stopped (asked with ctl stop or the TUI),
exit code 1' (a stopped run did not fail by itself); 'cut short (supervisor gone)'.
"""
from __future__ import annotations

CUT_SHORT = "cut short (supervisor gone)"


def run_end(exit_code: int | None, *, stopped: str | None = None, failure: tuple[int, str] | None = None,
            cut_short: bool = False) -> str:
    """`failure`: the rank that failed first and its cause ("exit 1: ValueError: x")."""
    code = "?" if exit_code is None else exit_code
    if cut_short:
        head = CUT_SHORT
    elif stopped:
        head = f"stopped ({stopped}), exit code {code}"
    else:
        head = f"exit code {code}"
    if failure is None:
        return head
    rank, cause = failure
    own = f"exit {exit_code}: "
    if not (cut_short or stopped) and cause.startswith(own):  # the run's exit code is the rank's: once
        return f"{head}: rank {rank}: {cause.removeprefix(own)}"
    return f"{head}: rank {rank} {cause}"


def run_ended(exit_code: int | None, *, stopped: str | None = None, failure: tuple[int, str] | None = None,
              cut_short: bool = False) -> str:
    """The sentence: 'run ended: exit code 0'."""
    return "run ended: " + run_end(exit_code, stopped=stopped, failure=failure, cut_short=cut_short)
