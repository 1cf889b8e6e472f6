"""The nodes of a merged view (status.Status's `nodes`, made by sources.multinode.combine) on the main
screen: the header's line per node (its host, its workers by state, or why it cannot be
reached), the GPU panel's node labels, and what to tell when a node is lost or comes back.
Pure; the UI thread draws what these return. A plain run has no `nodes`: nothing changes.
"""
from __future__ import annotations

from mpwatch.contract import NodeStatus, State, Status
from mpwatch.text import fmt
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Line, line

MAX_NODE_LINES = 4  # past this many nodes, one summary line and the unreachable ones
COUNTED = (State.RUNNING, State.STALLED, State.PAUSED, State.FAILED, State.STARTING, State.RESTARTING)
COUNT_STYLE = {State.STALLED: "bold yellow", State.FAILED: "bold red", State.PAUSED: "bold blue"}


def nodes_of(status: Status) -> list[NodeStatus]:
    return status.get("nodes") or []


def multi(status: Status) -> bool:
    """Several nodes: the table gets its NODE column."""
    return len(nodes_of(status)) > 1


def where(n: NodeStatus) -> str:
    return n["host"] or "here"


def down_text(n: NodeStatus) -> str:
    since = (f" for {fmt.age(round(n['down_for']))}"
             if n["down_for"] is not None and n["down_for"] >= 1 else "")
    return f"unreachable{since}: {n['error'] or 'no answer'} (retrying)"


def node_line(n: NodeStatus, g: Glyphs) -> Line:
    segs: list[tuple[str, str]] = [(f"node {n['node']} ", "bold"), (where(n), "cyan")]
    if not n["reachable"]:
        return line(*segs, (f"  {g.state.get(State.FAILED, 'x')} {down_text(n)}", "bold red"))
    segs.append((f"  {n['workers']} workers: ", ""))
    for s in COUNTED:
        k = n["counts"].get(s, 0)
        if k or s == State.RUNNING:
            segs.append((f"{g.state.get(s, '?')} {k} {s}  ", COUNT_STYLE.get(s, "") if k else ""))
    if n["finished"]:
        segs.append(("finished", "bold"))
    elif n["base_rank"]:
        segs.append((f"ranks from {n['base_rank']}", "bright_black"))
    return line(*segs)


def header_lines(status: Status, g: Glyphs) -> list[Line]:
    """A line per node (a summary past MAX_NODE_LINES nodes); none for a plain run."""
    nodes = nodes_of(status)
    if len(nodes) <= MAX_NODE_LINES:
        return [node_line(n, g) for n in nodes]
    down = [n for n in nodes if not n["reachable"]]
    head = line((f"{len(nodes)} nodes: ", "bold"), (f"{len(nodes) - len(down)} reachable", ""),
                (f", {len(down)} unreachable" if down else "", "bold red" if down else ""))
    return [head, *[node_line(n, g) for n in down[:MAX_NODE_LINES - 1]]]


def changes(old: Status | None, new: Status) -> list[tuple[str, str]]:
    """(text, severity) for each node that was lost or came back since `old`."""
    before = {n["node"]: n for n in nodes_of(old)} if old is not None else {}
    out = []
    for n in nodes_of(new):
        was = before.get(n["node"])
        if was is None:
            continue  # a node just found: its first answer (or failure) is in the header
        if not n["reachable"] and was["reachable"]:
            out.append((f"node {n['node']} ({where(n)}) unreachable: {n['error']}; retrying", "error"))
        elif n["reachable"] and not was["reachable"]:
            out.append((f"node {n['node']} ({where(n)}) is back", "information"))
    return out


def gpu_label(status: Status) -> list[str]:
    """The label in front of each GPU row: its node once per group ("n1 "), blanks below."""
    out, last = [], None
    for gpu in status["gpus"]:
        node = gpu.get("node")
        out.append("    " if node == last else f"n{node}".ljust(3) + " ")
        last = node
    return out
