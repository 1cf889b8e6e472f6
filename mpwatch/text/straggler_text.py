"""The straggler finding in words (contract.straggler decides it): who, where it loses its time
against the others, where they wait for it, what each step costs, and why where mpwatch sees it.
Pure; any thread."""
from __future__ import annotations

from mpwatch.contract import OTHER, RankLabel, Score, rank_label
from mpwatch.text import fmt, safe

NAME_WIDTH = 40  # a phase's name as the script gave it, printable and cut


def _phase(name: str) -> str:
    return "time outside any phase" if name == OTHER else safe.printable(name, NAME_WIDTH)


def _waits_in(name: str) -> str:
    return "between the phases" if name == OTHER else f"in their {safe.printable(name, NAME_WIDTH)}"


def data_reason(children: int) -> str:
    """Why a rank's data phase is slow, as far as its processes tell."""
    if children:
        procs = "process" if children == 1 else "processes"
        return f"its data phase waits on its DataLoader's {children} worker {procs}"
    return "its data phase waits on its Dataset, loaded in its own process (no DataLoader workers)"


def reason(s: Score, why: str | None, children: int) -> str | None:
    """What mpwatch sees slowing it: its process or GPU (the pace's `why`), its data loading."""
    parts = [why] if why else []
    if s.slow == "data":
        parts.append(data_reason(children))
    return "; ".join(parts) or None


def describe(s: Score, label: RankLabel = rank_label, why: str | None = None) -> str:
    """'rank 1 is the straggler: its forward takes 212 ms against 11 ms on the others, who wait
    for it in their backward (each step 201 ms slower); short of CPU: ...'."""
    text = (f"{label(s.rank)} is the straggler: its {_phase(s.slow)} takes {fmt.span(s.own_s)} against "
            f"{fmt.span(s.others_s)} on the others")
    if s.wait is not None:
        text += f", who wait for it {_waits_in(s.wait)}"
    text += f" (each step {fmt.span(s.cost_s)} slower)"
    return text + (f"; {why}" if why else "")
