"""Control for the screen: the tunables screen's rows (`t`) and its list of checkpoint
requests, and the news a new status brings (a checkpoint every rank took, a change every rank
applied). Pure: a Status in (contract.status), lines and words out; moments are told from the
run's start, as the replay and `summary` tell them. UI thread.
"""
from __future__ import annotations

from mpwatch.contract import (
    CheckpointRequest,
    Status,
    TunableChange,
    TunableStatus,
    in_force,
    pending_changes,
    shown,
)
from mpwatch.text import fmt
from mpwatch.tui.render.segs import Line, line, pad

# narrow enough that at 80 columns CHANGED keeps a pending change's "from step S · k/n ranks"
COLS = (("NAME", 12), ("TYPE", 5), ("VALUE", 10), ("DEFAULT", 10))
PENDING = "yellow"
Severity = str


def at(ts: float, st: Status) -> str:
    return "+" + fmt.duration(max(0.0, ts - st["run"]["started"]))


def header() -> Line:
    return line(("  ".join(pad(name, w) for name, w in COLS) + "  CHANGED", "bold"))


def _when(step: int | None) -> str:
    return f"from step {step}" if step is not None else "at each rank's next call"


def _took(c: TunableChange) -> str:
    done = len(c["answers"])
    return f"{done}/{done + len(c['waiting'])} ranks"


def next_change(t: TunableStatus) -> TunableChange | None:
    """The pending change that comes into force first (the nearest step), if any."""
    pend = pending_changes(t)
    return min(pend, key=lambda c: (c["step"] is None, c["step"] or 0, c["id"])) if pend else None


def changed(t: TunableStatus, st: Status) -> list[Line]:
    """The change that made the value in force: from which step, how many ranks took it, who
    asked when; below it, a change still pending, the same way (the step first: a narrow
    screen cuts the end)."""
    c = in_force(t)
    if c is None:
        out = [line(("never changed", "bright_black"))]
    else:
        late = [a["rank"] for a in c["answers"] if a["late"]]
        parts = [(f"{_when(c['step'])} · ", ""), (_took(c), "green" if not c["waiting"] else PENDING)]
        if late:
            parts.append((f" · late: {fmt.ranks(late)}", "bold yellow"))
        parts.append((f" · {at(c['ts'], st)} by {c['by']}", ""))
        out = [line(*parts)]
    p = next_change(t)
    if p is not None:  # the second line, beside VALUE's pending value: the step first, never cut
        more = len(pending_changes(t)) - 1
        tail = f" · {at(p['ts'], st)} by {p['by']}" + (f" · {more} more pending" if more else "")
        out.append(line((f"{_when(p['step'])} · {_took(p)}", PENDING), (tail, "")))
    return out


def value_cell(t: TunableStatus) -> list[Line]:
    """The value in force; below it, the value a pending change brings."""
    out = [line((shown(t["value"]), ""))]
    p = next_change(t)
    if p is not None:
        out.append(line((f"→ {shown(p['value'])}", PENDING)))
    return out


def dialog_title(t: TunableStatus) -> Line:
    """The change dialog's first line: the value in force, a pending change, the default."""
    p = next_change(t)
    then = f"; {shown(p['value'])} {_when(p['step'])} ({_took(p)} took it)" if p is not None else ""
    now = f"now {shown(t['value'])}{then}; default {shown(t['default'])}"
    return line((f"{t['name']} ({t['type']}): {now}", ""))


def tunable_cells(t: TunableStatus, st: Status) -> tuple[list[Line], ...]:
    """A row of the tunables table: each cell its lines (two where a change is pending)."""
    return ([line((t["name"], ""))], [line((t["type"], ""))], value_cell(t),
            [line((shown(t["default"]), ""))], changed(t, st))


def checkpoint_line(r: CheckpointRequest, st: Status) -> Line:
    steps = sorted({a["step"] for a in r["answers"] if a["step"] is not None})
    took = f"taken at step {', '.join(map(str, steps))}" if steps else "none taken yet"
    parts = [(f"{at(r['ts'], st):>9} ", "bright_black"),
             (f"{fmt.ranks(r['ranks'])} {_when(r['step']).replace('from', 'at')}, by {r['by']}: {took}", "")]
    for what, ranks, style in (("waiting", r["waiting"], "yellow"), ("missed", r["missed"], "bold red"),
                               ("late", [a["rank"] for a in r["answers"] if a["late"]], "bold yellow")):
        if ranks:
            parts.append((f" · {what}: {fmt.ranks(ranks)}", style))
    return line(*parts)


def checkpoint_lines(st: Status) -> list[Line]:
    reqs = st.get("checkpoints") or []
    if not reqs:
        return [line(("no checkpoint asked yet (c on a rank, or: mpwatch ctl checkpoint all)",
                      "bright_black"))]
    return [checkpoint_line(r, st) for r in reversed(reqs)]


def _complete(answers: int, waiting: list[int]) -> bool:
    return answers > 0 and not waiting


def news(old: Status | None, new: Status) -> list[tuple[str, Severity]]:
    """What finished between two statuses: a checkpoint every rank asked took, a change every
    rank applied (each said once, when its last rank answers)."""
    out: list[tuple[str, Severity]] = []
    before = {r["id"]: r for r in (old.get("checkpoints") or [] if old is not None else [])}
    for r in new.get("checkpoints") or []:
        was = before.get(r["id"])
        if _complete(len(r["answers"]), r["waiting"]) and (was is None or not _complete(len(was["answers"]),
                                                                                          was["waiting"])):
            steps = sorted({a["step"] for a in r["answers"] if a["step"] is not None})
            late = any(a["late"] for a in r["answers"])
            out.append((f"checkpoint taken by {fmt.ranks([a['rank'] for a in r['answers']])}"
                        + (f" at step {', '.join(map(str, steps))}" if steps else "")
                        + (" (some late: see t)" if late else ""), "warning" if late else "information"))
    changes = {c["id"]: c for t in (old.get("tunables") or [] if old is not None else [])
               for c in t["changes"]}
    for t in new.get("tunables") or []:
        for c in t["changes"]:
            was_c: TunableChange | None = changes.get(c["id"])
            if _complete(len(c["answers"]), c["waiting"]) and (
                    was_c is None or not _complete(len(was_c["answers"]), was_c["waiting"])):
                out.append((f"{t['name']} = {shown(c['value'])} "
                            f"on {fmt.ranks([a['rank'] for a in c['answers']])} "
                            + _when(c["step"]), "information"))
    return out
