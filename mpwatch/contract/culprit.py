"""Which rank holds the others up? Pure: from each rank's last reported step, its state
and what its stall diagnosis says (the collective its main thread waits in, where it
is stuck), name the likely culprit of a collective hang.

A collective blocks every rank that reached it until the last one arrives. So when
ranks are stalled, a rank the user paused, a rank behind the leading step, or a stalled
rank that is not inside a collective while its peers are, is the one the others wait for;
only when the ranks are known to share collectives (a worker says torch.distributed is
initialised, or a stalled rank's stack is in a collective): independent workers wait for
nobody.
The finding says the waiting first, then whom they wait for and why:
"ranks 0,2 wait in all_reduce at step 84 for rank 1, which was paused at 17:35:20 (p resumes)",
"ranks 0,1,3 wait at step 119 for rank 2, which is at step 118 (in load (t.py:9))".
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mpwatch.contract.names import State
from mpwatch.contract.status import Culprit, Lag

Row = Mapping[str, Any]
RanksLabel = Callable[[Sequence[int]], str]  # ranks -> "rank 1" | "ranks 0,2" (a merged view adds nodes)


def ranks_text(rs: Iterable[int]) -> str:
    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ",".join(map(str, rs))


def _is(rs: Sequence[object]) -> str:
    return "is" if len(rs) == 1 else "are"


def clock(ts: float) -> str:
    """A wall-clock time of today as people read it: 17:35:20 (local time); "?" for a time no
    clock shows (a status from elsewhere may say 1e300, or NaN)."""
    try:
        return time.strftime("%H:%M:%S", time.localtime(ts))
    except (OverflowError, ValueError, OSError):
        return "?"


def analyze(workers: Sequence[Row], label: RanksLabel = ranks_text) -> Culprit | None:
    """workers: [{rank, step, state, dist, stall: {collective, where} | None, paused_at}] (WorkerStatus
    rows). Returns None with fewer than two ranks that reported a step, else
    {leader_step, lags: [{rank, step, lag}], culprits: [...], waiting: [...], text}
    (a list, not a dict keyed by rank: it crosses JSON). text is None while nothing is
    stalled."""
    ws = [w for w in workers if w.get("step") is not None and isinstance(w.get("step"), (int, float))]
    if len(ws) < 2:
        return None
    lead = max(w["step"] for w in ws)
    lag = {w["rank"]: lead - w["step"] for w in ws}
    out = Culprit(leader_step=lead,
                    lags=[Lag(rank=w["rank"], step=w["step"], lag=lag[w["rank"]]) for w in ws],
                    culprits=[], waiting=[], text=None)
    stalled = [w for w in ws if w.get("state") == State.STALLED]
    if not stalled:
        return out
    found = _culprits(ws, stalled, lag)
    if found is None:
        out["text"] = _no_culprit(ws, stalled, lead, label)
        return out
    culprits, waiting = found
    out["culprits"] = sorted(w["rank"] for w in culprits)
    out["waiting"] = sorted(w["rank"] for w in waiting)
    out["text"] = describe(culprits, waiting, label)
    return out


def _culprits(ws: list[Row], stalled: list[Row],
              lag: Mapping[int, int]) -> tuple[list[Row], list[Row]] | None:
    """(culprits, waiting), or None when nothing tells the culprit apart (or the ranks share
    no collective)."""
    stall = {w["rank"]: (w.get("stall") or {}) for w in ws}
    if not any(w.get("dist") for w in ws) and not any(stall[w["rank"]].get("collective") for w in stalled):
        return None
    top = max(w["step"] for w in stalled)
    paused = [w for w in ws if w.get("state") == State.PAUSED and w["step"] <= top]
    if paused:  # the user stopped it: its peers cannot finish a collective without it
        behind = [w for w in ws if w.get("state") not in (State.PAUSED, State.STALLED) and w["step"] < top]
        return paused + behind, stalled
    at_lead = [w for w in ws if lag[w["rank"]] == 0]
    behind = [w for w in ws if lag[w["rank"]] > 0]
    if behind and all(w.get("state") == State.STALLED for w in at_lead):
        return behind, at_lead  # those at the front cannot go on: they wait for the ones behind
    in_coll = [w for w in stalled if stall[w["rank"]].get("collective")]
    outside = [w for w in stalled if not stall[w["rank"]].get("collective") and stall[w["rank"]].get("where")]
    if in_coll and outside:
        return outside, in_coll
    return None


def _steps(rows: Sequence[Row]) -> str:
    steps = sorted({w["step"] for w in rows})
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}..{steps[-1]}"


def _no_culprit(ws: list[Row], stalled: list[Row], lead: int, label: RanksLabel) -> str:
    moving = [w["rank"] for w in ws if w.get("state") != State.STALLED]
    text = f"{label([w['rank'] for w in stalled])} stalled at {_steps(stalled)}"
    if moving:
        text += f"; {label(moving)} {_is(moving)} not stalled (leading step {lead})"
    elif len(stalled) > 1:
        text += "; no rank lags behind: compare their stacks"
    return text


def describe(culprits: Sequence[Row], waiting: Sequence[Row], label: RanksLabel = ranks_text) -> str:
    """The finding in words: who waits, where and at which step, for whom, and why that one
    holds them up (paused by the user, behind at its step, stuck in its own code)."""
    colls = sorted({str(c) for w in waiting if (c := (w.get("stall") or {}).get("collective"))})
    rs = [w["rank"] for w in waiting]
    verb = "waits" if len(rs) == 1 and label(rs).startswith("rank ") else "wait"
    head = f"{label(rs)} {verb}" + (f" in {colls[0]}" if len(colls) == 1 else "") + f" at {_steps(waiting)}"
    return f"{head} for " + " and ".join(_why(group, label) for group in _groups(culprits))


def _groups(culprits: Sequence[Row]) -> list[list[Row]]:
    """Paused ranks together, then the others by step."""
    paused = [w for w in culprits if w.get("state") == State.PAUSED]
    rest = [w for w in culprits if w.get("state") != State.PAUSED]
    by_step: dict[int, list[Row]] = {}
    for w in rest:
        by_step.setdefault(w["step"], []).append(w)
    return ([paused] if paused else []) + [by_step[s] for s in sorted(by_step)]


def _why(group: Sequence[Row], label: RanksLabel) -> str:
    who = label([w["rank"] for w in group])
    if group[0].get("state") == State.PAUSED:
        times = [t for w in group if isinstance(t := w.get("paused_at"), (int, float))]
        when = f" at {clock(min(times))}" if times else ""
        return f"{who}, which {'was' if len(group) == 1 else 'were'} paused{when} (p resumes)"
    where = [x for w in group if (x := (w.get("stall") or {}).get("where"))]
    return f"{who}, which {_is(group)} at step {group[0]['step']}" + (
        f" (in {where[0]})" if len(group) == 1 and where else "")
