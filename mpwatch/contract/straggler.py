"""Which rank holds the others up? Pure: from each rank's last reported step, its state
and what its stall diagnosis says (the collective its main thread waits in, where it
is stuck), name the likely culprit of a collective hang.

A collective blocks every rank that reached it until the last one arrives. So when
ranks are stalled, a rank behind the leading step, or a stalled rank that is not inside
a collective while its peers are, is the one the others wait for:
"rank 2 is at step 118; ranks 0,1,3 wait at step 119".
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mpwatch.contract.status import Lag, State, Straggler


def _ranks(rs: Iterable[int]) -> str:
    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ",".join(map(str, rs))


def _is(rs: Sequence[int]) -> str:
    return "is" if len(rs) == 1 else "are"


def analyze(workers: Sequence[Mapping[str, Any]]) -> Straggler | None:
    """workers: [{rank, step, state, stall: {collective, where} | None}] (WorkerStatus rows).
    Returns None with fewer than two ranks that reported a step, else
    {leader_step, lags: [{rank, step, lag}], culprits: [...], waiting: [...], text}
    (a list, not a dict keyed by rank: it crosses JSON). text is None while nothing is
    stalled."""
    ws = [w for w in workers if w.get("step") is not None and isinstance(w.get("step"), (int, float))]
    if len(ws) < 2:
        return None
    lead = max(w["step"] for w in ws)
    lag = {w["rank"]: lead - w["step"] for w in ws}
    out = Straggler(leader_step=lead, lags=[Lag(rank=w["rank"], step=w["step"], lag=lag[w["rank"]]) for w in ws],
                    culprits=[], waiting=[], text=None)
    stalled = [w for w in ws if w.get("state") == State.STALLED]
    if not stalled:
        return out
    stall = {w["rank"]: (w.get("stall") or {}) for w in ws}
    at_lead = [w for w in ws if lag[w["rank"]] == 0]
    behind = [w for w in ws if lag[w["rank"]] > 0]
    if behind and all(w.get("state") == State.STALLED for w in at_lead):
        # Those at the front cannot go on: they wait for the ones behind.
        culprits = behind
        waiting = at_lead
    else:
        in_coll = [w for w in stalled if stall[w["rank"]].get("collective")]
        outside = [w for w in stalled if not stall[w["rank"]].get("collective")
                   and stall[w["rank"]].get("where")]
        if in_coll and outside:
            culprits, waiting = outside, in_coll
        else:
            steps = sorted({w["step"] for w in stalled})
            at = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}..{steps[-1]}"
            moving = [w["rank"] for w in ws if w.get("state") != State.STALLED]
            text = f"{_ranks(w['rank'] for w in stalled)} stalled at {at}"
            if moving:
                text += f"; {_ranks(moving)} {_is(moving)} not stalled (leading step {lead})"
            elif len(stalled) > 1:
                text += "; no rank lags behind: compare their stacks"
            out["text"] = text
            return out
    out["culprits"] = sorted(w["rank"] for w in culprits)
    out["waiting"] = sorted(w["rank"] for w in waiting)
    out["text"] = _culprit_text(culprits, waiting, stall)
    return out


Row = Mapping[str, Any]


def _culprit_text(culprits: list[Row], waiting: list[Row], stall: Mapping[int, Mapping[str, Any]]) -> str:
    """The finding in words, e.g. 'rank 2 is at step 118 (in f); ranks 0,1,3 wait in all_reduce at step 119'."""
    parts = []
    by_step: dict[int, list[int]] = {}
    for w in culprits:
        by_step.setdefault(w["step"], []).append(w["rank"])
    for step in sorted(by_step):
        rs = by_step[step]
        where = [stall[r].get("where") for r in rs if stall[r].get("where")]
        parts.append(f"{_ranks(rs)} {_is(rs)} at step {step}" + (f" (in {where[0]})" if len(rs) == 1 and where else ""))
    colls = sorted({str(c) for w in waiting if (c := stall[w["rank"]].get("collective"))})
    wsteps = sorted({w["step"] for w in waiting})
    wat = f"step {wsteps[0]}" if len(wsteps) == 1 else f"steps {wsteps[0]}..{wsteps[-1]}"
    wait_txt = f"{_ranks(w['rank'] for w in waiting)} wait" + (f" in {colls[0]}" if len(colls) == 1 else "")
    return "; ".join(parts) + "; " + wait_txt + f" at {wat}"
