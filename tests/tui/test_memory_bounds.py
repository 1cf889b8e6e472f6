"""What the TUI keeps while attached to a long run stays under its caps, however many
snapshots and events come (the soak benchmark, bench/bench_soak.py, watches the memory of
a real one for an hour). Counts, not timings."""
from __future__ import annotations

from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.render.view import Column
from mpwatch.tui.widgets import worker_table
from mpwatch.tui.widgets.cell_cache import CellCache
from tests.documented import EVENTS_KEPT

COLS = [Column("rank", "RANK", 5), Column("state", "STATE", 12), Column("step", "STEP", 9),
        Column("loss", "LOSS", 9), Column("hb", "HB", 5)]


def busy_rows(snapshots: int, ranks: int = 16):
    """The cells of each rank in each snapshot of a run where every rank reports at 50 Hz:
    rank and state repeat, step, loss and heartbeat are new every time."""
    for s in range(snapshots):
        for r in range(ranks):
            step = s * 13 + r
            yield (str(r), (("●", "green"), (" running", "")), f"{step:,}", f"{1.0 / (step + 1):.4g}",
                   f"{(s + r) % 97 / 10:.1f}s")


def test_the_worker_tables_cell_memo_stays_small_however_long_the_run():
    most = 0
    for cells in busy_rows(2000):  # 32,000 rows drawn, most of their steps and losses never seen again
        worker_table.render_row(cells, COLS)
        most = max(most, len(worker_table._FITTED))
    assert most <= 2048  # two generations of 1024 cells (~1.5 MiB); it held 8192 (~6 MiB)


def test_cells_that_repeat_stay_in_the_memo_across_turns(monkeypatch):
    monkeypatch.setattr(worker_table, "_FITTED", CellCache(64))
    running = (("●", "green"), (" running", ""))
    first = worker_table._fitted(running, 12, False)
    for i, cells in enumerate(busy_rows(300)):
        worker_table.render_row(cells, COLS)
        if i % 50 == 0:
            assert worker_table._fitted(running, 12, False) is first  # drawn once, looked up since
    assert worker_table._FITTED.turns > 20 and len(worker_table._FITTED) <= 128


def test_the_event_log_keeps_the_last_events_only():
    app = MpwatchApp(None, None, glyphs=glyphs.UNICODE)
    for batch in range(30):
        app.keep_events([{"event": "report", "seq": batch * 100 + i, "rank": 0} for i in range(1, 101)])
        assert len(app.event_log) <= EVENTS_KEPT
    assert len(app.event_log) == EVENTS_KEPT
    assert [e["seq"] for e in app.event_log] == list(range(2001, 3001))
