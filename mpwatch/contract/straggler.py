"""Which rank makes the others wait at every step, where it loses the time, and why. Pure: from
the ranks' paces (contract.pace: seconds a step in each phase, the medians of their latest
stretches). The supervisor runs it over its ranks (supervisor.diagnose.straggler_watch), a merged
view of several nodes over all of theirs (sources.multinode). Not the hang's culprit
(contract.culprit): a straggler steps, slowly, and the others with it.

Ranks that step together (a collective in each step) take the same time a step, so the time a
rank loses in its own work lands in the others' collectives: DDP's all-reduce in backward,
FSDP's in the optimizer step, an explicit all_reduce in `sync`. Against the median rank (each
phase's median over the ranks: the straggler is never its own reference once there are three),
a straggler spends more in the phases where it works (`excess`) and less in the one where the
others wait (`saving`); both are the time the others lose, so the smaller of the two, as a share
of the step, is its score: relative to the step, never a fixed number of milliseconds (a 5 ms
step made 15 ms is as much a straggler as a 2 s step made 6 s). Ranks that do not step together
wait for nobody: a slow one only spends more, and saves nowhere; and one whose step is not the
median rank's (LOCKSTEP) does not step with the others at all.

Two ranks are each other's median: one spends more where it works, the other more where it
waits. WAITS ranks the phases by how likely they hold a collective; a rank whose excess is in a
phase more likely to wait than the one it saves in is a waiter, never the straggler.

`Standing` adds the hysteresis: a rank is named after SCORE_HOLD_S of scores at APPEAR or more,
one finding updated in place, that ends when its score stays under END for END_HOLD_S (it caught
up) or it has no pace any more (it stopped stepping: the hang's rules take over). The finding in
words is text.straggler_text's.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from mpwatch.contract.coerce import as_float, as_int, as_str
from mpwatch.contract.pace import OTHER
from mpwatch.contract.status import Pace, StragglerInfo, WorkerStatus

APPEAR = 0.25  # the others lose at least this share of each step waiting for it
END = 0.12  # under this share it has caught up
SCORE_HOLD_S = 8.0  # the score holds this long before the finding appears
END_HOLD_S = 8.0  # and stays low this long before it ends
LOCKSTEP = 0.2  # a rank whose step is this share longer or shorter than the median's does not step with them
TEXT_MAX = 400  # a finding's words read back from a file are cut here
EPS = 0.01  # a phase under this share of the step on the rank and on the median rank is no speed (1.0)
SPEED_MAX = 100.0  # a rank whose phase is ~0 s where the median rank's is not: this much faster, at most
# How likely a phase holds a collective the others wait in (names not here: 0, the user's work).
WAITS = {"sync": 3, "comm": 3, "communication": 3, "collective": 3, "all_reduce": 3, "allreduce": 3,
         "reduce": 3, "barrier": 3, OTHER: 2, "backward": 1, "optimizer": 1, "compute": 1, "step": 1}

RankLabel = Callable[[int], str]  # a rank in words: "rank 1", "rank 9 on node 1"


def rank_label(rank: int) -> str:
    return f"rank {rank}"


@dataclass(frozen=True)
class Score:
    """One rank against the median rank."""

    rank: int
    share: float  # the share of each step the others lose waiting for it
    slow: str  # the phase where it spends most beyond the median rank
    wait: str | None  # the phase where it spends least against it: where the others wait
    own_s: float  # seconds a step in `slow`, on it
    others_s: float  # the same on the other ranks (their median)
    cost_s: float  # its excess: each step is this much slower for it

    @property
    def waiter(self) -> bool:
        """Its excess is in a phase likelier to wait than the one it saves in: it waits."""
        return self.wait is not None and WAITS.get(self.slow, 0) > WAITS.get(self.wait, 0)

    @property
    def straggles(self) -> bool:
        return self.share >= APPEAR and not self.waiter


def _times(paces: Mapping[int, Pace]) -> tuple[list[str], dict[int, dict[str, float]]]:
    names = sorted({k for p in paces.values() for k in p["phases"]})
    return names, {r: {k: p["phases"].get(k, 0.0) for k in names} for r, p in paces.items()}


def speed(ref: float, own: float, floor: float) -> float:
    """The median rank's time in a phase over the rank's own: the true ratio (a forward 670 times
    slower reads 1/670: issue 40; a share of the step added to both floored every ratio past
    100x), to three significant digits; 1.0 where both are under `floor` (no time to compare)."""
    if max(ref, own) < floor:
        return 1.0
    return SPEED_MAX if own * SPEED_MAX <= ref else float(f"{ref / own:.3g}")


def relative(paces: Mapping[int, Pace]) -> dict[int, dict[str, float]]:
    """Each rank's speed in each phase against the median rank's: 1.0 as fast, 0.05 twenty times
    slower, 3.0 three times faster (a rank that waits less). {} for each with fewer than two."""
    if len(paces) < 2:
        return {r: {} for r in paces}
    names, t = _times(paces)
    floor = EPS * median(p["step_s"] for p in paces.values())
    ref = {k: median(t[r][k] for r in t) for k in names}
    return {r: {k: speed(ref[k], t[r][k], floor) for k in names} for r in t}


def fill_relative(workers: Sequence[WorkerStatus]) -> None:
    """Set each pace's `relative` (WorkerStatus rows just built, the pace theirs alone)."""
    paces = {w["rank"]: p for w in workers if (p := w["pace"]) is not None}
    for r, rel in relative(paces).items():
        paces[r]["relative"] = rel


def scores(paces: Mapping[int, Pace]) -> dict[int, Score]:
    """Each rank's score against the median rank; {} with fewer than two ranks."""
    if len(paces) < 2:
        return {}
    names, t = _times(paces)
    step = median(p["step_s"] for p in paces.values())
    ref = {k: median(t[r][k] for r in t) for k in names}
    out = {}
    for r, mine in t.items():
        over = {k: mine[k] - ref[k] for k in names}
        excess = sum(v for v in over.values() if v > 0)
        saving = -sum(v for v in over.values() if v < 0)
        slow = max(names, key=lambda k: over[k])
        wait = min(names, key=lambda k: over[k]) if saving > 0 else None
        together = step > 0 and abs(paces[r]["step_s"] - step) <= LOCKSTEP * step
        share = min(excess, saving) / step if together else 0.0
        # the others' own median where it may be said (a rank of no account: the median rank's,
        # which it hardly moves; a pass over every rank for each would cost 256 ranks 65536 reads)
        others = median(t[q][slow] for q in t if q != r) if share >= END else ref[slow]
        out[r] = Score(r, share, slow, wait, mine[slow], others, excess)
    return out


def info(s: Score, lost_s: float, why: str | None, rank: int | None = None) -> StragglerInfo:
    """The finding's numbers; `rank`: its global rank where the score's is a node's local one."""
    return StragglerInfo(rank=s.rank if rank is None else rank, phase=s.slow, own_s=round(s.own_s, 6),
                         others_s=round(s.others_s, 6), wait_phase=s.wait, cost_s=round(s.cost_s, 6),
                         lost_s=round(lost_s, 3), reason=why)


def read_info(raw: object) -> StragglerInfo | None:
    """A finding's numbers read back from a file (events.jsonl: a replay, a summary), checked;
    None for anything that is not what the supervisor writes."""
    if not isinstance(raw, dict):
        return None
    rank, node = as_int(raw.get("rank")), as_int(raw.get("node"))
    phase, wait, why = as_str(raw.get("phase")), raw.get("wait_phase"), raw.get("reason")
    nums = [as_float(raw.get(k)) for k in ("own_s", "others_s", "cost_s", "lost_s")]
    if rank is None or phase is None or not all(v is not None and math.isfinite(v) for v in nums) \
            or not (wait is None or isinstance(wait, str)) or not (why is None or isinstance(why, str)):
        return None
    own_s, others_s, cost_s, lost_s = (float(v or 0.0) for v in nums)
    out = StragglerInfo(rank=rank, phase=phase[:TEXT_MAX], own_s=own_s, others_s=others_s,
                        wait_phase=None if wait is None else wait[:TEXT_MAX], cost_s=cost_s, lost_s=lost_s,
                        reason=None if why is None else why[:TEXT_MAX])
    if node is not None:
        out["node"] = node
    return out


# ---------------------------------------------------------------- hysteresis ----
class Finding:
    """A standing straggler: since when its score passed, when it was named (wall clock), its
    latest score, what it cost so far."""

    def __init__(self, score: Score, since: float, named: float, step: int | None):
        self.score = score
        self.since = since
        self.named = named
        self.lost_s = 0.0
        self.step = step  # its step when `lost_s` was last added to


class Standing:
    """The findings over successive scores: who is named, since when, and who caught up."""

    def __init__(self) -> None:
        self.passing: dict[int, float] = {}  # rank -> since when its score is at APPEAR or more
        self.calm: dict[int, float] = {}  # named rank -> since when its score is under END
        self.found: dict[int, Finding] = {}

    def update(self, got: Mapping[int, Score], steps: Mapping[int, int | None],
               now: float) -> tuple[list[Finding], list[int]]:
        """The standing findings after these scores (`steps`: each rank's step now, for what
        it costs), and the ranks whose finding ended."""
        ended = []
        for r in list(self.found):
            s = got.get(r)
            if s is None or s.share < END:
                since = self.calm.setdefault(r, now)
                if s is None or now - since >= END_HOLD_S:
                    ended.append(r)
                    del self.found[r]
                    self.calm.pop(r, None)
            else:
                self.calm.pop(r, None)
        for r, s in got.items():
            if not s.straggles:
                self.passing.pop(r, None)
            elif r not in self.found and now - self.passing.setdefault(r, now) >= SCORE_HOLD_S:
                self.found[r] = Finding(s, self.passing[r], now, steps.get(r))
        self._advance(got, steps)
        return list(self.found.values()), ended

    def _advance(self, got: Mapping[int, Score], steps: Mapping[int, int | None]) -> None:
        """Each finding's latest score (kept while the rank is catching up: the words stay those
        of its straggling) and what it cost since the last check (each step, its excess now)."""
        for r, f in self.found.items():
            s, step = got.get(r), steps.get(r)
            if s is not None and s.share >= END:
                f.score = s
            if step is not None and f.step is not None and step > f.step:
                f.lost_s += (step - f.step) * (s.cost_s if s is not None else f.score.cost_s)
            if step is not None:
                f.step = step
