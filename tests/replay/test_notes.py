"""The replay's notes in the TUI's banner follow the files: a note that takes another's place
(rundir.RunDir.note's `replaces`: a count that grew, the thinning note after a later pass)
reaches the screen though the number of notes stays the same. On a live run whose
events.jsonl is thinned under the reader (its supervisor here is this test process), written
through the real writer, rundir.writer.RunStore."""
from __future__ import annotations

import json
import os

from mpwatch.rundir import layout
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.render import glyphs
from mpwatch.tui.replay_app import ReplayApp
from tests.helpers import wait_for
from tests.replay.test_events_cap import T0, write_run
from tests.tui.conftest import until


def thinned_note(path) -> str:
    """What the thinning note must say of the file as it is: every pass's reports that went."""
    recs = [json.loads(line) for line in (path / layout.EVENTS).read_text().splitlines()]
    went = sum(r["reports_before"] - r["reports_after"] for r in recs if r["event"] == "thinned")
    assert went > 0
    return f"events.jsonl was thinned to stay under its size cap: {went} report event(s) up to"


def write_thinned(store: RunStore, seconds: int) -> None:
    passes = store.thinned
    write_run(store, seconds)
    store.flush()
    wait_for(lambda: store._thinner is None, 30, what="the thinning pass")
    assert store.thinned > passes


async def test_the_banner_shows_a_note_replaced_by_a_later_one(tmp_path, monkeypatch):
    d = tmp_path / "run"
    store = RunStore(d, Settings(events_mb=48 * 1024 / (1 << 20)))
    store.create()
    store.write_json(layout.RUN_JSON, {"run_id": "live", "started": T0, "pid": os.getpid()})
    store.write_json(layout.CONTROL_JSON, {"pid": os.getpid()})
    try:
        write_thinned(store, 700)
        src = ReplaySource(d)
        assert src.live
        app = ReplayApp(src, glyphs=glyphs.UNICODE, notices=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.snapshots > 0, what="the first status")
            first = thinned_note(d)
            await until(pilot, lambda: first in str(app.banner.render()), what=f"the note {first!r} in the banner")
            shown = len(src.notes)
            write_thinned(store, 700)  # more passes: the note says more reports went, in its place
            then = thinned_note(d)
            assert then != first
            await until(pilot, lambda: any(then in n for n in src.notes), what="the replay to read the new passes")
            assert len(src.notes) == shown
            await until(pilot, lambda: then in str(app.banner.render()), what=f"the note {then!r} in the banner")
            assert str(app.banner.render()) == "\n".join(src.notes)
    finally:
        store.close()
