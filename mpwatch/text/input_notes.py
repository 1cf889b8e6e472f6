"""What a rank sent that the supervisor refused or could not use, in words: the same notes for
the TUI's NOTE cell and `ctl status`'s lines (each counted, with the latest why)."""
from __future__ import annotations

from mpwatch.contract import WorkerStatus


def input_notes(w: WorkerStatus) -> list[str]:
    """'N reports rejected: why', 'N bad inputs: why', each where the rank has any."""
    out = []
    rejected = w.get("rejected")
    if rejected:
        out.append(f"{rejected['count']} reports rejected: {rejected['why']}")
    bad = w.get("bad_inputs")
    if bad:
        out.append(f"{bad['count']} bad inputs: {bad['why']}")
    return out
