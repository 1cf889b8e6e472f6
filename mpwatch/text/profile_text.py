"""A profile in words (contract.actions' ProfileRequest): where it stands on a rank, its file,
its top operators; for `ctl status`, `summary` and the TUI's detail view alike. Pure."""
from __future__ import annotations

from mpwatch.contract import FileResult, MemoryRequest, ProfileRequest, profile_span, rank_state, rank_states
from mpwatch.text import fmt

TOP_HEAD = f"{'SELF CPU':>9} {'SELF GPU':>9} {'CALLS':>6}  OPERATOR"
TOP_HEAD_CPU = f"{'SELF CPU':>9} {'CALLS':>6}  OPERATOR"  # a rank that used no GPU


def latest(profiles: list[ProfileRequest], rank: int) -> ProfileRequest | None:
    """The newest profile asked of the rank."""
    return next((r for r in reversed(profiles) if rank in r["ranks"]), None)


def result(req: ProfileRequest | MemoryRequest, rank: int) -> FileResult | None:
    return next((r for r in req["results"] if r["rank"] == rank), None)


def _steps(req: ProfileRequest, rank: int) -> str:
    span = profile_span(req, rank)
    return "" if span is None else f"steps {span[0]}-{span[1]}" if span[1] > span[0] else f"step {span[0]}"


def state_text(req: ProfileRequest, rank: int, step_now: int | None) -> str:
    """One line: where the profile stands on the rank (step_now: the rank's step, for a running one)."""
    state, r = rank_state(req, rank, req["results"]), result(req, rank)
    if state == "asked":
        return (f"asked: starts once step {req['step']} is reported" if req["step"] is not None
                else "asked: starts at its next step")
    if state == "running":
        a = next(a for a in req["answers"] if a["rank"] == rank)
        if a["step"] is None or step_now is None:
            return "running"
        done = max(0, min(req["steps"], step_now - a["step"]))
        return f"running: {done} of {req['steps']} steps ({_steps(req, rank)})"
    if state == "missed":
        return "missed: its process ended before it started"
    if r is None:
        return str(state)
    if r["state"] == "failed":
        return f"failed: {r['why']}"
    note = f", {r['why']}" if r["why"] else ""
    if r["tool"] == "py-spy":
        return f"flame graph (py-spy) {r['path']}, {fmt.size_long(r['bytes'])}{note}"
    waited = f"; the loop waited {fmt.span((r['held_ms'] or 0) / 1000)}" if r["held_ms"] is not None else ""
    return f"trace {r['path']}, {fmt.size_long(r['bytes'])}, {_steps(req, rank)}{waited}{note}"


def _time(us: float | None) -> str:
    if us is None:
        return "-"
    return "<0.1 ms" if us < 50 else fmt.span(us / 1e6)


def top_lines(r: FileResult | None, n: int) -> list[str]:
    """The top operators by self time, `n` at most, under their heading (the first line); the
    GPU's column only where the rank used one."""
    if r is None or not r["top"]:
        return []
    gpu = any(t["self_device_us"] is not None for t in r["top"])
    return [TOP_HEAD if gpu else TOP_HEAD_CPU] + [
        f"{_time(t['self_cpu_us']):>9} " + (f"{_time(t['self_device_us']):>9} " if gpu else "")
        + f"{t['calls']:>6}  {t['name']}" for t in r["top"][:n]]


def request_text(req: ProfileRequest) -> str:
    """The request: which ranks, which steps, who asked."""
    when = (f"steps {req['step'] + 1}-{req['step'] + req['steps']}" if req["step"] is not None
            else f"its next {req['steps']} steps")
    return f"profile #{req['id']} of {fmt.ranks(req['ranks'])}, {when}, asked by {req['by']}"


def outcome_text(req: ProfileRequest | MemoryRequest, steps_now: dict[int, int | None] | None = None) -> str:
    """Where it stands on every rank asked, grouped: 'written on ranks 0-1 (rank-N/profiles/x.json.gz);
    running on rank 2'. A failure says the first rank's why."""
    groups: dict[str, list[int]] = {}
    states = rank_states(req, req["results"])  # linear, however many ranks were asked
    for rank in req["ranks"]:
        groups.setdefault(str(states.get(rank)), []).append(rank)
    results = {r["rank"]: r for r in req["results"]}
    out = []
    for state in ("written", "running", "asked", "failed", "missed"):
        ranks = groups.get(state)
        if not ranks:
            continue
        text = f"{state} on {fmt.ranks(ranks)}"
        r = results.get(ranks[0])
        if state == "written" and r is not None:
            where = str(r["path"])
            where = where if len(ranks) == 1 else where.replace(f"rank-{ranks[0]}/", "rank-N/", 1)
            text += f" ({where})"
        elif state == "failed" and r is not None:
            text += f" ({r['why']})"
        out.append(text)
    return "; ".join(out)
