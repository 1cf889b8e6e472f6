"""What a worker's child process is, in words: the NOTE of its row in the TUI's table and its
line in `ctl status` (a Hogwild trainer, a DataLoader worker, a shell the script started). Its
command line says how it was started, not what it is. Pure; any thread."""
from __future__ import annotations

from mpwatch.contract import ChildStatus


def child_note(c: ChildStatus, rank: int) -> str:
    """'child process of rank 0, pid 4242 (python3); reports its own steps'."""
    name = f" ({c['name']})" if c["name"] else ""
    own = "; reports its own steps" if c["reporting"] else ""
    return f"child process of rank {rank}, pid {c['pid']}{name}{own}"
