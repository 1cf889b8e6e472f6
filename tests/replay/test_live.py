"""`mpwatch show` on a live run: the replay reads the files as the supervisor writes them,
its end follows the run while a moment chosen earlier stays put, and once the run ends
its end is final.json. And a live run's events.jsonl swapped by a thinning pass under the
reader: indexed again, with the note."""
from __future__ import annotations

import json
import os

from mpwatch.contract import RunState, State
from mpwatch.rundir import layout, writer
from mpwatch.settings import Settings
from mpwatch.sources.replay import ReplaySource
from tests.helpers import wait_for
from tests.replay.test_events_cap import T0, write_run
from tests.tui.conftest import WORKER


def test_show_follows_a_live_run_and_its_end(headless):
    run = headless(WORKER, n=2)
    wait_for(lambda: len({e["rank"] for e in run.events("report")}) == 2, 60, what="both ranks reporting")
    src = ReplaySource(run.run_dir)
    assert src.live and src.rd.final is None
    st = src.status()
    assert st["run"]["state"] == RunState.RUNNING and {w["state"] for w in st["workers"]} == {State.RUNNING}
    step = max(w["step"] or 0 for w in st["workers"])
    wait_for(lambda: max(w["step"] or 0 for w in src.status()["workers"]) >= step + 10, 60,
             what="the end following the run's reports")
    src.move("start")
    assert src.status()["run"]["uptime"] == 0.0
    n = len(src.events_list)
    run.ctl("restart", "1")
    wait_for(lambda: src.reload(force=True) and any(e["event"] == "restarted" for e in src.events_list), 60,
             what="the restart in the replay")
    assert src.where()[0] == 0 and len(src.events_list) > n  # the chosen moment stays where it was
    src.move("end")
    wait_for(lambda: next(w for w in src.status()["workers"] if w["rank"] == 1)["restarts"] == 1, 60,
             what="rank 1's restart at the end")
    run.ctl("stop")
    run.wait_exit(60)
    wait_for(lambda: src.reload(force=True) is not None and not src.live, 30, what="the replay to see the end")
    final = json.loads((run.run_dir / layout.FINAL_JSON).read_text())
    assert src.status() == final


def test_a_thinning_pass_under_a_live_reader(tmp_path, monkeypatch):
    """A live run (its supervisor here is this test process: run.json and control.json name it)
    whose events.jsonl is thinned and swapped while the replay reads it."""
    store = writer.RunStore(tmp_path / "run", Settings(events_mb=48 * 1024 / (1 << 20)))
    store.create()
    store.write_json(layout.RUN_JSON, {"run_id": "live", "started": T0, "pid": os.getpid()})
    store.write_json(layout.CONTROL_JSON, {"pid": os.getpid()})
    write_run(store, 100)
    store.flush()
    src = ReplaySource(tmp_path / "run")
    assert src.live and store.thinned == 0
    before = src.files.ino
    write_run(store, 1500)
    store.flush()
    wait_for(lambda: store.thinned >= 1, 30, what="a thinning pass")
    assert src.reload(force=True) and src.files.ino != before
    assert any(n.startswith("events.jsonl was thinned") for n in src.notes)
    assert all(e["event"] != "thinned" for e in src.events_list)
    assert [e["seq"] for e in src.events_list] == list(range(1, len(src.events_list) + 1))
    curve = src.history(0)
    assert curve[0][0] == 0.0 and curve[-1][0] == 1499.0  # thinned, both ends kept
    store.close()
