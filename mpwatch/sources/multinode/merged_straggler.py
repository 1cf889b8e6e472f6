"""The straggler finding over every node's ranks (contract.straggler), which no node sees alone:
a rank on node 1 that makes the ranks of node 0 wait. Each node's own finding, blind to the other
nodes' ranks, gives way to it, as the hang's does. Pure but for the `Standing` the merged source
keeps between two looks at the nodes (sources.multinode.source), on the thread that polls.
"""
from __future__ import annotations

from collections.abc import Sequence

from mpwatch.contract import RunAlert, State, WorkerStatus, straggler
from mpwatch.text import straggler_text


def _stepping(w: WorkerStatus) -> bool:
    """A rank of a reachable node that steps in a process group (an unreachable node's rows are old)."""
    return "node_error" not in w and w["state"] == State.RUNNING and w["dist"] and w["pace"] is not None


def _on(node: int) -> straggler.RankLabel:
    return lambda rank: f"rank {rank} on node {node}"


def alerts(workers: Sequence[WorkerStatus], standing: straggler.Standing, now: float) -> list[RunAlert]:
    """The merged findings now (workers: the merged rows, global ranks, paces with their
    relative speeds across nodes): 'rank 9 on node 1 is the straggler: ...'."""
    rows = {w["rank"]: w for w in workers if _stepping(w)}
    got = straggler.scores({r: w["pace"] for r, w in rows.items() if w["pace"] is not None})
    found, _ = standing.update(got, {r: w["step"] for r, w in rows.items()}, now)
    out = []
    for f in found:
        s, w = f.score, rows.get(f.score.rank)
        if w is None or w["pace"] is None:
            continue
        node = w.get("node", 0)
        why = straggler_text.reason(s, w["pace"]["why"], len(w["children"]))
        text = straggler_text.describe(s, _on(node), why)
        info = straggler.info(s, f.lost_s, why)
        info["node"] = node
        out.append(RunAlert(ts=f.named, kind="straggler", message=text, rank=s.rank,
                            key=f"straggler:{s.rank}", straggler=info))
    return out
