"""The slowdown rule (contract.pace, contract.slowdown, text.slowdown_text) fed the phase times
recorded from real runs (tests/data/pace, made by `python -m tests.record_pace`): each rank's report
events, folded and read second by second as the supervisor's slowdown watch does. It names a run
slower than its own best (busy processes beside it, every rank's Dataset 3x slower) and ends when
the pace comes back; it stays silent through start-up, warm-up, checkpoint saves and evaluation
passes, and on a curriculum whose steps grow by design where the script says so (`work`). No
processes here."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest

from mpwatch.contract import PaceWindow, SlowdownInfo, slowdown
from mpwatch.text import slowdown_text
from tests.record_pace import DATA, SCENARIOS

CHECK_S = 1.0  # as the watch checks


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


@dataclass
class Replay:
    """What the rule said, second by second, over a recording."""

    named: list[float] = field(default_factory=list)  # when each finding was made
    ended: list[float] = field(default_factory=list)  # when each ended
    last: slowdown.Finding | None = None  # the last finding, as it stood last
    first: SlowdownInfo | None = None  # the first finding's numbers when it was made
    lost: float = 0.0  # the last finding's steps lost, as it stood last
    low: float = 1.0  # the lowest ratio to the best at any check once there was a best
    armed: float | None = None  # when the run first had a best
    best_at: float | None = None  # when its best was kept (the last time it moved)
    standing: slowdown.Standing = field(default_factory=slowdown.Standing)


def replay(rec: dict, work: bool = True) -> Replay:
    """Each check of the watch over the recording's samples (work: their `work` metric, where
    the script reported one)."""
    samples = sorted((s[0], int(r), s[1], s[2], s[3] if work and len(s) > 3 else None)
                     for r, got in rec["samples"].items() for s in got)
    windows = {int(r): PaceWindow() for r in rec["samples"]}
    steps: dict[int, int | None] = dict.fromkeys(windows)
    out = Replay()
    at, i = samples[0][0], 0
    while i < len(samples):
        at += CHECK_S
        while i < len(samples) and samples[i][0] <= at:
            t, r, step, ph, w = samples[i]
            windows[r].add(t, step, ph, w)
            steps[r] = step
            i += 1
        paces = {r: p for r, win in windows.items() if (p := win.pace(at)) is not None}
        found, ended = out.standing.update(slowdown.read(paces, steps, at), at)
        _note(out, found, ended, at)
    return out


def _note(out: Replay, found: slowdown.Finding | None, ended: bool, at: float) -> None:
    ratio = out.standing.ratio()
    if ratio is not None:
        out.armed = out.armed if out.armed is not None else at
        out.low = min(out.low, ratio)
        out.best_at = out.standing.best.at
    if ended:
        out.ended.append(at)
    if found is not None:
        if out.last is not found:
            out.named.append(at)
            out.first = out.first or slowdown.info(found, [], [])
        out.last, out.lost = found, found.lost_steps


def step_at(rec: dict, t: float, rank: str = "0") -> int:
    return max(s[1] for s in rec["samples"][rank] if s[0] <= t)


def first_time(rec: dict, step: int, rank: str = "0") -> float:
    return min(s[0] for s in rec["samples"][rank] if s[1] >= step)


def printed(rec: dict, rank: int, what: str) -> list[float]:
    """Each mean the script printed of its own `what` (every 50 steps)."""
    return [float(m.group(1)) for ln in rec["printed"][str(rank)] if (m := re.search(rf"{what} ([0-9.]+) s", ln))]


def test_every_recording_is_of_a_scenario_the_recorder_knows():
    assert {p.stem for p in DATA.glob("*.json")} <= set(SCENARIOS)


# ---------------------------------------------------------------- it names ----
def test_busy_processes_beside_the_run_slow_it_and_the_finding_ends_when_they_do():
    rec = load("busy")
    start, end = SCENARIOS["busy"].busy
    r = replay(rec)
    assert r.armed is not None and r.armed < start, "the run had its best before the busy processes came"
    assert r.best_at is not None and r.best_at < start
    assert len(r.named) == len(r.ended) == 1, (r.named, r.ended)
    assert start < r.named[0] <= start + 60, "named within a minute of their start"
    assert end < r.ended[0] <= end + 60, "over within a minute of their end"
    first, f = r.first, r.last
    assert first is not None and f is not None
    assert first["ratio"] < 0.7 and r.low < 0.65
    assert start - 15 <= first["since"] <= start + 30, "since when the pace fell, not when it was named"
    assert first["phase"] == "forward" and first["ranks"] == [0, 1, 2] and first["phase_ratio"] > 1.5, first
    # what it cost: the steps the run would have made at its best meanwhile
    best_rate = 1.0 / f.best.step_s
    would = best_rate * (r.ended[0] - f.since)
    made = step_at(rec, r.ended[0]) - step_at(rec, f.since)
    assert r.lost == pytest.approx(would - made, rel=0.3)


def test_a_dataset_3x_slower_on_every_rank_is_named_as_data_with_the_scripts_own_numbers():
    rec = load("data_slower")
    slower = max(first_time(rec, 1000, r) for r in rec["samples"])  # the 1000th batch, on every rank
    r = replay(rec)
    assert r.armed is not None and r.armed < slower
    assert len(r.named) == 1 and not r.ended
    assert slower < r.named[0] <= slower + 60
    f = r.last
    assert f is not None
    g = f.growth()
    assert g is not None and (g.phase, g.every) == ("data", True)
    before, after = printed(rec, 0, "data")[2:6], printed(rec, 0, "data")[-3:]
    assert g.ratio == pytest.approx((sum(after) / len(after)) / (sum(before) / len(before)), rel=0.2)
    info = slowdown.info(f, [slowdown_text.data(0)], [])
    text = slowdown_text.describe(info, g.every)
    assert re.fullmatch(r"the run slowed to \d+\.\d steps/s from \d+\.\d \(0\.\d\dx\) since \d\d:\d\d:\d\d: "
                        r"every rank's data takes [23]\.\dx its own best; every rank waits longer for its data, "
                        r"loaded in their own processes \(no DataLoader workers\): a slower Dataset or disk", text), text


# ---------------------------------------------------------- it stays silent ----
@pytest.mark.parametrize("name", ["balanced", "balanced_workers", "warmup", "long_pauses"])
def test_start_up_warm_up_checkpoint_saves_and_evaluations_are_no_slowdown(name):
    """balanced: a 3 s checkpoint save every 20 s, an evaluation every 150 steps; balanced_workers:
    an 8 s save every 30 s, an evaluation every 60 steps, DataLoader workers; warmup: every forward
    slower for the first 45 s of steps, saves and evaluations; long_pauses: a 15 s save every 50 s (no
    pace meanwhile: the run is judged again once it has stepped a while) and long evaluations. The
    rule had a best in each, and no check came near the margin."""
    r = replay(load(name))
    assert r.armed is not None, "the rule had a best to compare with"
    assert r.named == [], r.named
    assert r.low > slowdown.APPEAR + 0.05, f"the lowest ratio {r.low:.2f} is near the margin"


def test_warm_up_is_never_the_best():
    rec = load("warmup")
    first = min(s[0] for got in rec["samples"].values() for s in got if s[1])
    r = replay(rec)
    assert r.best_at is not None and r.best_at >= first + 45, "its best is kept past the slow first 45 s"


def test_a_curriculum_the_script_reports_is_no_slowdown_and_would_be_without_its_work():
    """Its steps grow 1.25x every 250 steps by design; the script says so (`work`). The same samples
    without their work metric: each step slower than the best, a finding (the rule reads `work`)."""
    rec = load("curriculum")
    assert any(len(s) > 3 for s in rec["samples"]["0"]), "the recording carries the work metric"
    r = replay(rec)
    assert r.armed is not None and r.named == [], r.named
    assert r.low > slowdown.APPEAR
    blind = replay(rec, work=False)
    assert blind.named, "without the work metric the growing steps read as a slowdown"


def test_the_run_pace_for_the_status():
    r = replay(load("data_slower"))
    pace = slowdown.run_pace(r.standing)
    assert pace is not None and pace["ratio"] < slowdown.APPEAR
    assert pace["steps_per_s"] < pace["best_steps_per_s"]
    assert "work" not in pace


def test_a_finding_read_back_is_what_was_written_and_nothing_else_is():
    r = replay(load("busy"))
    assert r.last is not None
    out = slowdown.info(r.last, ["4 processes outside the run take 2.0 CPUs: python (pid 1, user u) 50%"],
                        [{"pid": 1, "user": "u", "name": "python", "cmd": "python -c x", "cpu": 0.5}])
    assert slowdown.read_info(json.loads(json.dumps(out))) == out
    assert slowdown.read_info({**out, "ratio": "fast"}) is None
    assert slowdown.read_info({**out, "causes": "x"}) is None
    assert slowdown.read_info([out]) is None
    long = slowdown.read_info({**out, "causes": ["x" * 10_000] * 1000})
    assert long is not None and len(long["causes"]) == slowdown.LIST_MAX
    assert len(long["causes"][0]) == slowdown.TEXT_MAX
