"""The run against its own best: slower than the pace it kept before, with every rank alike (no
straggler: each is as slow as the others), and since when. Pure: from the stepping ranks' paces
(contract.pace: the medians of their latest stretches, so a checkpoint save or an evaluation pass,
one stretch, moves none). The supervisor runs it over its ranks (supervisor.diagnose.slowdown_watch);
what took the machine is that watch's, in words text.slowdown_text's.

The run's pace is the median rank's seconds a step, or a unit of work where every rank reports its
steps' `work` (contract.pace: a curriculum, a growing sequence length, is no slowdown). A rank's
step is the sum of its phases' medians (its typical step): where pauses come often (an evaluation
pass every few seconds, a checkpoint save), several of its latest stretches hold one and move the
median of their lengths, never the median time of each phase. Its best is
the fastest pace it KEPT: the slowest reading of SUSTAIN_S of readings, the best such window,
never one within WARMUP_S of its first reading (warm-up, compilation and a first evaluation are no
baseline, and a lucky second is none either). Each rank's phases then are its own best. After
any stretch without a pace (start-up, a restart, a pause, a long evaluation) the run is judged again
only once it has stepped WARMUP_S: a restarted process warms up again.

`Standing` adds the hysteresis: the finding is made once the pace has stayed at APPEAR of its
best or below for HOLD_S, one finding updated in place, that ends once the pace is back at END or
above for END_HOLD_S, or the run has had no pace for END_HOLD_S (it stopped stepping: paused,
stalled, ended: the hang's rules take over). From when the pace first fell under the margin, it
counts the steps it cost (those the run would have made at its best meanwhile) and the seconds.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

from mpwatch.contract.coerce import as_float, as_int, as_str
from mpwatch.contract.status import Outsider, Pace, RunPace, SlowdownInfo

WARMUP_S = 20.0  # the run's first readings are never its best
SUSTAIN_S = 30.0  # the best is a pace held this long
GAP_S = 5.0  # readings this far apart: the pace was not held across the gap
APPEAR = 0.75  # the pace at this share of its best or less (each step 1.33x as long)
END = 0.85  # at this share or more, the pace is back
HOLD_S = 30.0  # the pace stays under APPEAR this long before the finding is made
END_HOLD_S = 20.0  # and back (or gone) this long before it ends
GROWN = 1.2  # a rank's phase at this many times its own best has grown
EPS = 0.02  # a share of the best step added to each phase time before a ratio (~0 s grows from nothing)
TEXT_MAX = 400  # a text read back from a file is cut here
LIST_MAX = 16  # and a list


@dataclass(frozen=True)
class Reading:
    """The run at one check: its pace, its step, each rank's phases."""

    at: float  # wall clock
    step_s: float  # seconds a step of the median rank
    unit_s: float  # seconds a unit of work (step_s / work), or a step where no work is reported
    work: float | None  # the work a step holds (the median rank's), where every rank says it
    step: int | None  # the median rank's step
    ranks: dict[int, dict[str, float]]  # each rank's seconds a unit of work (a step) in each phase


def step_s(p: Pace) -> float:
    """A rank's typical step: the sum of its phases' medians (its median stretch where it has none)."""
    return sum(p["phases"].values()) or p["step_s"]


def read(paces: Mapping[int, Pace], steps: Mapping[int, int | None], at: float) -> Reading | None:
    """The run's reading from its stepping ranks' paces (`steps`: each one's step now); None
    when no rank has a pace."""
    if not paces:
        return None
    works = [p.get("work") for p in paces.values()]
    work = median(w for w in works if w is not None) if all(w is not None for w in works) else None
    per = {r: (p.get("work") or 1.0) if work is not None else 1.0 for r, p in paces.items()}
    known = [s for r in paces if (s := steps.get(r)) is not None]
    typical = {r: step_s(p) for r, p in paces.items()}
    return Reading(at=at, step_s=median(typical.values()),
                   unit_s=median(typical[r] / per[r] for r in paces), work=work,
                   step=int(median(known)) if known else None,
                   ranks={r: {k: v / per[r] for k, v in p["phases"].items()} for r, p in paces.items()})


class Best:
    """The fastest pace the run kept for SUSTAIN_S, past WARMUP_S, and the reading it was kept at."""

    def __init__(self) -> None:
        self.first: float | None = None  # the first reading's time
        self.window: deque[Reading] = deque()  # the readings of the last SUSTAIN_S (and one older)
        self.reading: Reading | None = None  # the run at its best (its own phases, each rank's)
        self.unit_s: float | None = None  # the best kept: seconds a unit of work
        self.at: float | None = None  # when it was kept

    def add(self, r: Reading) -> None:
        if self.first is None:
            self.first = r.at
        if r.at - self.first < WARMUP_S:
            return
        if self.window and r.at - self.window[-1].at > GAP_S:
            self.window.clear()  # no pace in between (a long evaluation, a pause): not kept across it
        self.window.append(r)
        while len(self.window) > 1 and r.at - self.window[1].at >= SUSTAIN_S:
            self.window.popleft()
        if r.at - self.window[0].at < SUSTAIN_S:
            return
        kept = max(x.unit_s for x in self.window)  # its slowest reading: the pace it kept throughout
        if self.unit_s is None or kept < self.unit_s:
            self.unit_s, self.at, self.reading = kept, r.at, r


@dataclass(frozen=True)
class Growth:
    """The phase that grew the most against the ranks' own best."""

    phase: str
    ratio: float  # its time against its best, the median rank's
    ranks: list[int]  # the ranks on which it grew by GROWN or more
    every: bool  # on every rank


def grown(best: Reading, now: Reading) -> Growth | None:
    """The phase whose time a step grew the most, summed over the ranks both readings have."""
    ranks = sorted(set(best.ranks) & set(now.ranks))
    if not ranks:
        return None
    names = sorted({k for r in ranks for k in (*best.ranks[r], *now.ranks[r])})
    more = {k: sum(now.ranks[r].get(k, 0.0) - best.ranks[r].get(k, 0.0) for r in ranks) for k in names}
    phase = max(names, key=lambda k: more[k])
    if more[phase] <= 0:
        return None
    eps = EPS * best.unit_s
    ratios = {r: (now.ranks[r].get(phase, 0.0) + eps) / (best.ranks[r].get(phase, 0.0) + eps) for r in ranks}
    slow = [r for r in ranks if ratios[r] >= GROWN]
    return Growth(phase, round(median(ratios.values()), 2), slow, len(slow) == len(ranks))


# ---------------------------------------------------------------- hysteresis ----
@dataclass
class Finding:
    """A standing slowdown: since when the pace fell under the margin, when it was named, the
    run now and at its best, what it cost so far."""

    since: float
    named: float
    now: Reading
    best: Reading
    best_unit_s: float
    lost_steps: float = 0.0
    lost_s: float = 0.0

    @property
    def ratio(self) -> float:
        return self.best_unit_s / self.now.unit_s if self.now.unit_s > 0 else 1.0

    def growth(self) -> Growth | None:
        return grown(self.best, self.now)


@dataclass
class Standing:
    """The finding over successive readings: the best, the pace under the margin since when, the
    finding once it held, and when it ends."""

    best: Best = field(default_factory=Best)
    last: Reading | None = None  # the latest reading
    steady: float | None = None  # the run has had a pace without a gap since then
    under: float | None = None  # the pace has been at APPEAR or below since then
    calm: float | None = None  # a standing finding's pace has been back (or gone) since then
    found: Finding | None = None
    _lost: tuple[float, float] = (0.0, 0.0)  # steps and seconds lost while under, before the finding

    @property
    def suspect(self) -> bool:
        """The pace is under the margin, or a finding stands: worth a look at the machine."""
        return self.under is not None or self.found is not None

    def ratio(self, r: Reading | None = None) -> float | None:
        r = r or self.last
        if r is None or self.best.unit_s is None or r.unit_s <= 0:
            return None
        return self.best.unit_s / r.unit_s

    def update(self, r: Reading | None, now: float) -> tuple[Finding | None, bool]:
        """The standing finding after this reading (None: no rank has a pace), and whether a
        finding ended."""
        prev, self.last = self.last, r
        if r is None:
            self.under, self._lost = None, (0.0, 0.0)
            return self._calm(now) if self.found is not None else (None, False)
        if prev is None or r.at - prev.at > GAP_S:
            self.steady = now
        self.best.add(r)
        ratio = self.ratio(r)
        if ratio is None:
            return None, False
        self._cost(prev, r)
        if self.found is not None:
            if ratio < END:
                self.calm = None
                self.found.now = r
                return self.found, False
            return self._calm(now)
        if ratio > APPEAR or now - (self.steady or now) < WARMUP_S:
            self.under, self._lost = None, (0.0, 0.0)
            return None, False
        self.under = self.under if self.under is not None else now
        if now - self.under >= HOLD_S and self.best.reading is not None and self.best.unit_s is not None:
            self.found = Finding(self.under, now, r, self.best.reading, self.best.unit_s, *self._lost)
        return self.found, False

    def _calm(self, now: float) -> tuple[Finding | None, bool]:
        self.calm = self.calm if self.calm is not None else now
        if now - self.calm < END_HOLD_S:
            return self.found, False
        self.found, self.calm, self.under, self._lost = None, None, None, (0.0, 0.0)
        return None, True

    def _cost(self, prev: Reading | None, r: Reading) -> None:
        """The steps and seconds lost between two readings, while the pace is under its best's."""
        if prev is None or prev.step is None or r.step is None or r.step <= prev.step:
            return
        if self.best.unit_s is None or (self.found is None and self.under is None):
            return
        steps = r.step - prev.step
        ratio = self.best.unit_s / r.unit_s
        lost_steps = steps * max(0.0, 1.0 / ratio - 1.0) if ratio > 0 else 0.0
        lost_s = steps * max(0.0, r.step_s - self.best.unit_s * (r.work or 1.0))
        if self.found is not None:
            self.found.lost_steps += lost_steps
            self.found.lost_s += lost_s
        else:
            self._lost = (self._lost[0] + lost_steps, self._lost[1] + lost_s)


def run_pace(s: Standing) -> RunPace | None:
    """The run's pace against its best, for the status; None until it has a best."""
    r, b = s.last, s.best
    ratio = s.ratio()
    if r is None or ratio is None or b.reading is None or b.at is None:
        return None
    out = RunPace(steps_per_s=round(1.0 / r.step_s, 3) if r.step_s > 0 else 0.0,
                  best_steps_per_s=round(1.0 / b.reading.step_s, 3) if b.reading.step_s > 0 else 0.0,
                  ratio=round(ratio, 3), best_at=round(b.at, 3))
    if r.work is not None and b.reading.work is not None:
        out["work"], out["best_work"] = r.work, b.reading.work
    return out


def steps_per_s(paces: Sequence[Pace]) -> float | None:
    """The run's steps a second from its ranks' paces (the median rank's), before it has a best."""
    return round(1.0 / s, 3) if paces and (s := median(step_s(p) for p in paces)) > 0 else None


# ------------------------------------------------------------------- numbers ----
def info(f: Finding, causes: list[str], outsiders: list[Outsider],
         rank: Mapping[int, int] | None = None) -> SlowdownInfo:
    """The finding's numbers; `rank`: each node-local rank's global one."""
    g = f.growth()
    glob = (lambda r: rank.get(r, r)) if rank is not None else (lambda r: r)
    return SlowdownInfo(
        since=round(f.since, 3), steps_per_s=round(1.0 / f.now.step_s, 3) if f.now.step_s > 0 else 0.0,
        best_steps_per_s=round(1.0 / f.best.step_s, 3) if f.best.step_s > 0 else 0.0, ratio=round(f.ratio, 3),
        lost_steps=round(f.lost_steps, 1), lost_s=round(f.lost_s, 3),
        phase=g.phase if g is not None else None, phase_ratio=g.ratio if g is not None else None,
        ranks=[glob(r) for r in (g.ranks if g is not None else [])], causes=list(causes),
        outsiders=list(outsiders))


def _num(raw: dict[str, object], key: str) -> float | None:
    v = as_float(raw.get(key))
    return float(v) if v is not None and math.isfinite(v) else None


def read_outsider(raw: object) -> Outsider | None:
    if not isinstance(raw, dict):
        return None
    pid, cpu, name, cmd, user = (as_int(raw.get("pid")), _num(raw, "cpu"), as_str(raw.get("name")),
                                 as_str(raw.get("cmd")), raw.get("user"))
    if pid is None or cpu is None or name is None or cmd is None:
        return None
    if not (user is None or isinstance(user, str)):
        return None
    return Outsider(pid=pid, user=None if user is None else user[:TEXT_MAX], name=name[:TEXT_MAX],
                    cmd=cmd[:TEXT_MAX], cpu=cpu)


def read_info(raw: object) -> SlowdownInfo | None:
    """A finding's numbers read back from a file (events.jsonl: a replay, a summary), checked;
    None for anything that is not what the supervisor writes."""
    if not isinstance(raw, dict):
        return None
    nums = {k: _num(raw, k) for k in ("since", "steps_per_s", "best_steps_per_s", "ratio", "lost_steps",
                                       "lost_s")}
    phase, ratio = raw.get("phase"), raw.get("phase_ratio")
    ranks, causes, outs = raw.get("ranks"), raw.get("causes"), raw.get("outsiders")
    if any(v is None for v in nums.values()) or not (phase is None or isinstance(phase, str)) \
            or not (ratio is None or _num(raw, "phase_ratio") is not None) or not isinstance(ranks, list) \
            or not isinstance(causes, list) or not isinstance(outs, list):
        return None
    n = {k: float(v or 0.0) for k, v in nums.items()}
    out = SlowdownInfo(
        since=n["since"], steps_per_s=n["steps_per_s"], best_steps_per_s=n["best_steps_per_s"],
        ratio=n["ratio"],
        lost_steps=n["lost_steps"], lost_s=n["lost_s"], phase=None if phase is None else phase[:TEXT_MAX],
        phase_ratio=_num(raw, "phase_ratio"),
        ranks=[r for r in ranks[:LIST_MAX * 64] if isinstance(r, int) and not isinstance(r, bool)],
        causes=[c[:TEXT_MAX] for c in causes[:LIST_MAX] if isinstance(c, str)],
        outsiders=[o for x in outs[:LIST_MAX] if (o := read_outsider(x)) is not None])
    node = as_int(raw.get("node"))
    if node is not None:
        out["node"] = node
    return out
