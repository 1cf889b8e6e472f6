"""The tunables, checkpoint requests and profiles of several nodes as one run's (sources.multinode.combine
calls it): ranks become global ranks; a request every node got at once (the merged source sends
each the same step: sources.multinode.source) is one request, its answers and waiting ranks the
nodes' together. Pure; called with the node parts in node order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from mpwatch.contract.status import (
    ActionRequest,
    CheckpointRequest,
    FileResult,
    ProfileRequest,
    RankAnswer,
    Status,
    TunableChange,
    TunableStatus,
)

Rank = Callable[[int | None], int | None]  # a node's local rank -> the global rank


def _global(rs: list[int], rank: Rank) -> list[int]:
    return sorted(g for r in rs if (g := rank(r)) is not None)


def _answers(answers: list[RankAnswer], rank: Rank) -> list[RankAnswer]:
    return [RankAnswer(rank=g, step=a["step"], late=a["late"])
            for a in answers if (g := rank(a["rank"])) is not None]


def _join_change(into: list[TunableChange], c: TunableChange, rank: Rank) -> None:
    same = next((x for x in into if (x["step"], x["value"], x["by"]) == (c["step"], c["value"], c["by"])
                 and abs(x["ts"] - c["ts"]) < 60), None)
    answers, waiting = _answers(c["answers"], rank), _global(c["waiting"], rank)
    if same is None:
        into.append(TunableChange(id=c["id"], ts=c["ts"], value=c["value"], old=c["old"], step=c["step"],
                                  by=c["by"], answers=answers, waiting=waiting,
                                  pending=bool(c.get("pending"))))
    else:
        same["answers"] = sorted(same["answers"] + answers, key=lambda a: a["rank"])
        same["waiting"] = sorted(same["waiting"] + waiting)
        same["pending"] = same["pending"] or bool(c.get("pending"))  # in force once on every node


def tunables(parts: Sequence[tuple[Status, Rank]]) -> list[TunableStatus]:
    out: dict[str, TunableStatus] = {}
    for st, rank in parts:
        for t in st.get("tunables") or []:
            m = out.get(t["name"])
            if m is None:
                m = out[t["name"]] = TunableStatus(name=t["name"], type=t["type"], default=t["default"],
                                                   value=t["value"], ranks=[], changes=[])
            m["ranks"] = sorted(m["ranks"] + _global(t["ranks"], rank))
            for c in t["changes"]:
                _join_change(m["changes"], c, rank)
            m["changes"].sort(key=lambda c: c["ts"])
    for m in out.values():  # the value in force on every node: the last change in force everywhere
        done = [c for c in m["changes"] if not c["pending"]]
        if done:
            m["value"] = done[-1]["value"]
    return [out[n] for n in sorted(out)]


def _same(out: Sequence[ActionRequest], r: ActionRequest) -> int | None:
    """The place in `out` of the request another node got at once (same step, same asker)."""
    return next((i for i, x in enumerate(out) if (x["step"], x["by"]) == (r["step"], r["by"])
                 and abs(x["ts"] - r["ts"]) < 60 and r["step"] is not None), None)


def _join(into: ActionRequest, mine: ActionRequest) -> None:
    for key in ("ranks", "waiting", "missed"):
        into[key] = sorted(into[key] + mine[key])
    into["answers"] = sorted(into["answers"] + mine["answers"], key=lambda a: a["rank"])


def _mine(r: ActionRequest, rank: Rank) -> ActionRequest:
    return ActionRequest(id=r["id"], ts=r["ts"], by=r["by"], step=r["step"], ranks=_global(r["ranks"], rank),
                         answers=_answers(r["answers"], rank), waiting=_global(r["waiting"], rank),
                         missed=_global(r["missed"], rank))


def checkpoints(parts: Sequence[tuple[Status, Rank]]) -> list[CheckpointRequest]:
    out: list[CheckpointRequest] = []
    for st, rank in parts:
        for r in st.get("checkpoints") or []:
            mine = CheckpointRequest(**_mine(r, rank))
            at = _same(out, r)
            if at is None:
                out.append(mine)
            else:
                _join(out[at], mine)
    return sorted(out, key=lambda r: r["ts"])


def profiles(parts: Sequence[tuple[Status, Rank]]) -> list[ProfileRequest]:
    """Each node's profiles, as checkpoints, with their outcomes (paths stay each node's own)."""
    out: list[ProfileRequest] = []
    for st, rank in parts:
        for r in st.get("profiles") or []:
            results = [FileResult(**{**x, "rank": g}) for x in r["results"]
                       if (g := rank(x["rank"])) is not None]
            mine = ProfileRequest(**_mine(r, rank), steps=r["steps"], results=results)
            at = _same(out, r)
            if at is None:
                out.append(mine)
            else:
                _join(out[at], mine)
                out[at]["results"] = sorted(out[at]["results"] + results, key=lambda x: x["rank"])
    return sorted(out, key=lambda r: r["ts"])
