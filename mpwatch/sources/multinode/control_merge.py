"""The tunables and the actions' requests (checkpoints, profiles, memory snapshots: every action of
contract.actions) of several nodes as one run's (sources.multinode.combine calls it): ranks become
global ranks; a request every node got at once (the merged source sends each the same step:
sources.multinode.source) is one request, its answers, waiting ranks and outcomes the nodes'
together (a file's path stays its node's own). Pure; called with the node parts in node order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from mpwatch.contract import (
    ACTIONS,
    Action,
    ActionRequest,
    FileResult,
    LiveView,
    RankAnswer,
    Status,
    TunableChange,
    TunableStatus,
    record,
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
    """Another node's part of the same request into it: its ranks, answers and outcomes."""
    for key in ("ranks", "waiting", "missed"):
        into[key] = sorted(into[key] + mine[key])
    into["answers"] = sorted(into["answers"] + mine["answers"], key=lambda a: a["rank"])
    if "results" in mine:  # an action that has outcomes (contract.actions.record put them)
        joined, theirs = cast(dict[str, Any], into), cast(dict[str, Any], mine)
        joined["results"] = sorted(joined["results"] + theirs["results"], key=lambda x: x["rank"])


def _mine(r: ActionRequest, rank: Rank) -> ActionRequest:
    return ActionRequest(id=r["id"], ts=r["ts"], by=r["by"], step=r["step"], ranks=_global(r["ranks"], rank),
                         answers=_answers(r["answers"], rank), waiting=_global(r["waiting"], rank),
                         missed=_global(r["missed"], rank))


def requests(parts: Sequence[tuple[Status, Rank]], action: Action) -> list[ActionRequest]:
    """Each node's requests of `action` (its list in the status), joined, with their outcomes."""
    out: list[ActionRequest] = []
    for st, rank in parts:
        for r in cast(list[ActionRequest], cast(dict[str, Any], st).get(action.key) or []):
            mine = record(action, _mine(r, rank), r, _results(r, rank))
            at = _same(out, r)
            if at is None:
                out.append(mine)
            else:
                _join(out[at], mine)
    return sorted(out, key=lambda r: r["ts"])


def _results(r: ActionRequest, rank: Rank) -> list[FileResult]:
    """A node's outcomes of a request (an action that has them), on global ranks."""
    mine = cast(list[FileResult], cast(dict[str, Any], r).get("results") or [])
    return [FileResult(**{**x, "rank": g}) for x in mine if (g := rank(x["rank"])) is not None]


def view(parts: Sequence[tuple[Status, Rank]]) -> LiveView:
    """The live requests' part of the merged status: the tunables and every action's requests."""
    return LiveView(tunables(parts), {a.name: requests(parts, a) for a in ACTIONS.values()})
