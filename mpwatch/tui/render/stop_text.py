"""What stopping a rank does, in the words of the dialogs that ask first (kill, restart,
restart all, a resize that restarts every rank): what supervisor.workers.groups really sends,
with the run's own --stop-signal and --grace, and what it does to a process group the rank
shares with others. Pure (a Status in, sentences out); UI thread.
"""
from __future__ import annotations

from mpwatch.contract import ALIVE_STATES, RunOptions, Status, WorkerStatus, ranks_text


def _grace(options: RunOptions) -> str:
    return f"{options['grace']:g}s"


def stop_one(options: RunOptions) -> str:
    """How one rank is stopped (groups.ProcessGroups.kill, after_exit, reap)."""
    return (f"{options['stop_signal']} to its own process first, so a handler can save while its children "
            f"run; the rest of its process group gets SIGTERM once it ends, and all of it SIGKILL "
            f"after {_grace(options)} (--grace).")


def stop_every(options: RunOptions) -> str:
    """How every rank is stopped: each as one is (stop_one)."""
    return (f"{options['stop_signal']} to each rank's own process first, SIGTERM to the rest of its "
            f"process group once it ends, SIGKILL to all of it after {_grace(options)} (--grace)")


def group_peers(status: Status | None, w: WorkerStatus) -> list[int]:
    """The live ranks that share w's process group: the worker side said torch.distributed is
    initialised in w (`dist`), and they are alive. Empty otherwise."""
    if status is None or not w.get("dist"):
        return []
    return [x["rank"] for x in status["workers"] if x["rank"] != w["rank"] and x["state"] in ALIVE_STATES]


def shares_group(rank: int, peers: list[int]) -> str:
    return f"Rank {rank} shares a process group with {ranks_text(peers)} (torch.distributed)"


def kill_warning(options: RunOptions, rank: int, peers: list[int]) -> str:
    """What killing a rank of a process group does to its peers (a 4-rank gloo run ends)."""
    then = ("so they end too, and the run with them" if options["max_restarts"] == 0
            else "so they end too; restarted (--max-restarts), they wait for it at their rendezvous")
    return (f"{shares_group(rank, peers)}: they cannot go on without it, {then}. To start the group "
            f"anew instead, restart all (R).")


def restart_warning(rank: int, peers: list[int]) -> str:
    n = len(peers) + 1
    return (f"{shares_group(rank, peers)}: restarted alone, it cannot rejoin them, and their collectives "
            f"fail. Restart all {n} to start the group anew.")
