"""A CUDA memory snapshot request in words (contract.actions' MemoryRequest: `ctl memory`, the
TUI's `M`): which ranks, at which step, who asked, and where it stands on each rank (a file
written, or why none was: a rank that has not imported torch or initialised CUDA says so); for
`ctl status` (the newest) and `summary` (each). Pure."""
from __future__ import annotations

from mpwatch.contract import MemoryRequest
from mpwatch.text import fmt, profile_text


def request_text(req: MemoryRequest) -> str:
    when = f"at step {req['step'] + 1}" if req["step"] is not None else "at its next step"
    return f"CUDA memory snapshot #{req['id']} of {fmt.ranks(req['ranks'])}, {when}, asked by {req['by']}"


def said(req: MemoryRequest) -> str:
    """The request and where it stands: 'CUDA memory snapshot #1 of rank 0, ..., asked by ctl
    ana@host: failed on rank 0 (this process has not initialised CUDA)'."""
    return f"{request_text(req)}: {profile_text.outcome_text(req)}"
