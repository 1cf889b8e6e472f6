"""How a worker's process ended, in words: pure decisions, tested without processes.

A cause comes from the process's own output (never mpwatch's markers in its logs), says the
signal that ended it by name, turns NCCL's watchdog line into "NCCL timeout in ALLREDUCE #5
after 600 s", and says when a rank of a process group failed because a peer ended first
("its collectives failed after rank 2 was killed").
"""
from __future__ import annotations

import re
import signal
from typing import NamedTuple

from mpwatch.contract import State, numtext
from mpwatch.rundir import crash

# Its numbers are ASCII digits within bounds (contract.numtext): a line of 400 digits is no timeout.
_NCCL_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: "
                            r"WorkNCCL\(SeqNum=(" + numtext.INT + r"), OpType=(\w{1,40})"
                            r".{0,2000}?\) ran for ([0-9]{1,15}) milliseconds", re.ASCII)
# What a rank says when a peer of its process group went away (gloo, NCCL, the TCP store).
_COMM_ERROR = re.compile(r"Connection (?:reset|closed) by peer|Broken pipe|DistBackendError|NCCL|gloo|"
                         r"ProcessGroup|c10d|Socket Timeout|timed out|TCPStore|Connection refused", re.I)
# Why mpwatch ended a process, as its cause says it (the kill_reason of supervisor.workers.groups).
KILLED_WHY = {"kill": "killed on request", "restart": "stopped to restart", "resize": "stopped for a resize",
              "stop": "stopped with the run", "new round": "stopped for a new rendezvous round"}
# Why mpwatch asked a process to end, as the cause of one that then exited 0 on the stop signal says it.
CLEAN_WHY = {"kill": "a kill asked for", "restart": "to restart", "resize": "for a resize",
             "stop": "the run was stopped", "new round": "a new rendezvous round"}
NCCL_LINES = 60  # the last lines searched for NCCL's watchdog line
PEER_WINDOW_S = 660.0  # a peer's end this long before a failure can explain it (NCCL's 10 min timeout)


class Exit(NamedTuple):
    state: State  # exited | failed | killed
    exit_code: int | None
    signal: str | None
    cause: str


class PeerEnd(NamedTuple):
    """Another rank's end, the first since this attempt started: a likely first domino."""

    rank: int
    how: str  # "was killed", "failed", "died of SIGSEGV", ...
    ago: float  # seconds before this exit


def exit_cause(returncode: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) of a Popen returncode."""
    if returncode < 0:
        try:
            return None, signal.Signals(-returncode).name
        except ValueError:
            return None, f"signal {-returncode}"
    return returncode, None


def nccl_timeout(tail: list[str]) -> str | None:
    """NCCL's watchdog line in words: 'NCCL timeout in ALLREDUCE #5 after 600 s'."""
    for line in reversed(tail):
        m = _NCCL_WATCHDOG.search(line[:crash.LINE_MAX])
        if m:  # < 10**15 ms: a float holds it
            return f"NCCL timeout in {m.group(2)} #{m.group(1)} after {int(m.group(3)) / 1000:.0f} s"
    return None


def peer_failure(peer: PeerEnd | None, dist: bool, err: str | None, sig: str | None) -> bool:
    """A rank of a process group that failed because a peer ended first: it said so in its
    error (a closed connection, a timeout, NCCL...), or died without a word of its own."""
    if peer is None or not dist or peer.ago > PEER_WINDOW_S:
        return False
    return (err is not None and bool(_COMM_ERROR.search(err))) or (err is None and sig in (None, "SIGABRT"))


def judge(returncode: int, kill_reason: str | None, stderr_tail: list[str], peer: PeerEnd | None = None,
          dist: bool = False, stop_signal: str | None = None) -> Exit:
    """killed when mpwatch ended it (kill, restart, resize, stop), exited on exit 0 (one that
    exits 0 on the stop signal mpwatch sent it, `stop_signal`, stopped cleanly: exited too, and
    its cause says so), else failed, with the signal or code and what the process itself said
    (its last error line, or NCCL's watchdog timeout), and the peer whose end made its
    collectives fail."""
    code, sig = exit_cause(returncode)
    if kill_reason is not None and code == 0 and stop_signal is not None:
        why = CLEAN_WHY.get(kill_reason, kill_reason)
        return Exit(State.EXITED, code, sig, f"stopped cleanly on {stop_signal} ({why}), exit 0")
    if kill_reason is not None:
        why = KILLED_WHY.get(kill_reason, f"{kill_reason} by mpwatch")
        return Exit(State.KILLED, code, sig, why + (f" ({sig})" if sig else f" (exit {code})"))
    if code == 0:
        return Exit(State.EXITED, code, sig, "exit 0")
    tail = crash.own_output(stderr_tail)
    how = f"exit {code}" if sig is None else sig if sig.startswith("signal ") else f"signal {sig}"
    timeout = nccl_timeout(tail[-NCCL_LINES:])
    err = crash.error_line(tail)
    if timeout is not None:
        err = timeout
    if peer_failure(peer, dist, err, sig):
        assert peer is not None  # peer_failure says so
        said = f" ({err})" if err else ""
        return Exit(State.FAILED, code, sig,
                    f"{how}: its collectives failed after rank {peer.rank} {peer.how}{said}")
    if sig == "SIGKILL" and err is None:
        err = "sent from outside mpwatch (a user, a scheduler, or the kernel's out-of-memory killer)"
    return Exit(State.FAILED, code, sig, how + (f": {err}" if err else ""))


def ended_how(state: State, kill_reason: str | None, sig: str | None) -> str:
    """How a rank ended, as the cause of its peers' failures says it: 'rank 2 was killed'."""
    if kill_reason is not None:
        return {"kill": "was killed", "restart": "was restarted", "resize": "was stopped for a resize",
                "stop": "was stopped"}.get(kill_reason, f"was ended by mpwatch ({kill_reason})")
    if state is State.EXITED:
        return "exited"
    return f"died of {sig}" if sig and not sig.startswith("signal ") else "failed"
