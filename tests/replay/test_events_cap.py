"""events.jsonl stays under its cap (rundir.writer.RunStore, rundir.thinning): the older report
events are thinned, every other event stays, a `thinned` event says what went, and the
readers (rundir.reader, the replay) say so. Written through the real writer, RunStore."""
from __future__ import annotations

import json
import os

from mpwatch.rundir import layout, reader
from mpwatch.rundir.eventlines import own_report, report_fields
from mpwatch.rundir.thinning import MIN_CAP, cap_bytes
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from tests.helpers import wait_for

T0 = 1_700_000_000.0  # in the past: a live run's end is now


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_run(store: RunStore, seconds: int, ranks: int = 2) -> None:
    """A run's events at the supervisor's rates: a report a second per rank, a stall now and then,
    a child's report; written in bursts, each left to the thinning thread before the next."""
    store.event("run_started", ts=T0, script="train.py", args=[], nprocs=ranks, run_dir=str(store.dir), pid=1)
    for r in range(ranks):
        store.event("worker_started", r, ts=T0, pid=100 + r, world_size=ranks, attempt=0)
    for i in range(seconds):
        for r in range(ranks):
            store.report(r, T0 + i, report_fields(i, 1.0 / (i + 1), {"lr": 0.1}, 10, 0))
        if i % 100 == 50:
            store.event("stalled", 1, ts=T0 + i + 0.5, silent_for=6.0, step=i, pid=101, kind="blocked", detail=None)
            store.event("recovered", 1, ts=T0 + i + 0.7, step=i)
        if i % 100 == 70:
            store.report(0, T0 + i, report_fields(i, 50.0, {}, 1, 0, child=(900, 100)))
        if i % 50 == 0:
            store.flush()
            wait_for(lambda: store._thinner is None, 30, what="the thinning pass")


def test_the_cap_comes_from_the_settings(tmp_path):
    assert cap_bytes(Settings.from_env({}).events_mb) == 128 << 20
    assert cap_bytes(Settings.from_env({"MPWATCH_EVENTS_MB": "2"}).events_mb) == 2 << 20
    assert cap_bytes(Settings.from_env({"MPWATCH_EVENTS_MB": "0.000001"}).events_mb) == MIN_CAP
    assert RunStore(tmp_path, Settings.from_env({"MPWATCH_EVENTS_MB": "3"})).events_cap == 3 << 20


def test_events_are_thinned_under_the_cap_and_notable_events_are_never_dropped(tmp_path):
    cap = 64 * 1024
    store = RunStore(tmp_path / "run", Settings(events_mb=cap / (1 << 20)))
    assert store.events_cap == cap
    store.create()
    write_run(store, 3000)
    store.close()
    path = tmp_path / "run" / layout.EVENTS
    recs = records(path)
    assert store.thinned >= 2
    assert path.stat().st_size <= cap + cap // 4  # a pass starts past the cap and leaves it under 3/4
    notable = [r for r in recs if r["event"] not in ("report", "thinned")]
    assert len([r for r in notable if r["event"] == "stalled"]) == 30 and len(notable) == 1 + 2 + 60
    notes = [r for r in recs if r["event"] == "thinned"]
    assert notes and all(n["reports_after"] < n["reports_before"] for n in notes)
    own = {r: [x["step"] for x in recs if own_report(x) and x["rank"] == r]
           for r in (0, 1)}
    for steps in own.values():
        assert steps[0] == 0 and steps[-1] == 2999  # thinned, not cut: the curve keeps both ends
        assert steps == sorted(steps) and len(steps) < 3000
        assert len([s for s in steps if s >= 2950]) == 50  # the recent part at full detail
    # each rank's step just before a stall stays, whatever was thinned around it
    reports1 = {x["step"] for x in recs if x["event"] == "report" and x["rank"] == 1}
    assert all(s["step"] in reports1 for s in notable if s["event"] == "stalled")
    # lines stay whole JSON, in time order (the note at each pass's end)
    assert [r["ts"] for r in recs if r["event"] != "thinned"] == sorted(r["ts"] for r in recs
                                                                       if r["event"] != "thinned")


def test_the_readers_say_what_was_thinned(tmp_path):
    store = RunStore(tmp_path / "run", Settings(events_mb=32 * 1024 / (1 << 20)))
    store.create()
    store.write_json(layout.RUN_JSON, {"run_id": "r1", "started": T0, "pid": os.getpid()})
    write_run(store, 1500)
    store.close()
    rd = reader.read(tmp_path / "run")
    evs = rd.events()
    assert any(e["event"] == "thinned" for e in evs)
    note = [n for n in rd.notes if n.startswith("events.jsonl was thinned")]
    assert len(note) == 1 and "up to +" in note[0] and "no other event was dropped" in note[0]
    # the same note when only some kinds are read (the summary's way)
    rd2 = reader.read(tmp_path / "run")
    rd2.events(["worker_exited"])
    assert [n for n in rd2.notes if n.startswith("events.jsonl was thinned")] == note
