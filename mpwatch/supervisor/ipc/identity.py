"""Whose channel it is: a hello's rank and pid checked against the process that connected.

The run's authkey keeps other users out; it does not tell a run's processes apart (every worker
has it). So a hello is taken only from the process it names (the socket's peer credentials,
SO_PEERCRED, give its pid), and only for the rank that process belongs to: the rank's worker
itself, a process below it in the process tree, or one the run's marks put in that rank (a child
that daemonised: supervisor.workers.marks). Anything else is refused (supervisor.ipc.channels
closes it and the ledger says so). Runs on the hub's handshake threads; reads /proc.
"""
from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection

ANCESTRY_MAX = 64  # parents walked up from a peer (a process tree is never this deep)
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_pid(conn: Connection) -> int | None:
    """The pid of the process at the other end of a Unix socket (None where it cannot be read)."""
    try:
        s = socket.socket(fileno=conn.fileno(), family=socket.AF_UNIX)
    except OSError:
        return None
    try:
        pid, _, _ = _CRED.unpack(s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    except (OSError, AttributeError, struct.error):
        return None
    finally:
        s.detach()  # the fd stays the connection's
    return pid if pid > 0 else None


def parent(pid: int) -> int | None:
    """A process's parent, from /proc/PID/stat (None: gone, or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()  # the command name, in (), may hold anything
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def ancestors(pid: int) -> Iterator[int]:
    """pid's parent, its parent's, ... up to init (bounded)."""
    for _ in range(ANCESTRY_MAX):
        up = parent(pid)
        if up is None or up <= 1 or up == pid:
            return
        yield up
        pid = up


def refusal(rank: int, claimed: int, cred: int | None, worker: int | None,
            rank_of: Callable[[int], int | None] | None = None) -> str | None:
    """Why a hello of `rank` and pid `claimed`, from the process `cred` (SO_PEERCRED), is not
    that rank's, the rank's worker being `worker`; None when it is. rank_of(pid): the rank the
    run's marks give a process (None: no mark)."""
    if cred is None:  # no credentials here: the pid is the hello's word
        return None
    if cred != claimed:
        return f"its hello says pid {claimed}, the process that connected is {cred}"
    if worker is not None and (cred == worker or worker in ancestors(cred)):
        return None
    if rank_of is not None and rank_of(cred) == rank:
        return None
    return f"pid {cred} is no process of rank {rank}"
