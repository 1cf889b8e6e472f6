"""The events screen (`e`) against a real supervisor: the TUI keeps every event it was given,
the first snapshot's too, so a TUI attached to a run that has gone on for a while shows
every event from the first, and the ones that come after."""
from __future__ import annotations

from mpwatch.sources.local import Client
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.events import EventsScreen
from tests.helpers import wait_for
from tests.tui.conftest import WORKER, until


async def test_attaching_late_shows_every_event_from_the_first(headless):
    run = headless(WORKER, n=2)
    wait_for(lambda: len({e["rank"] for e in run.events("report")}) == 2, 60, what="both ranks reporting")
    run.ctl("restart", "1")  # events before the TUI attaches: the first snapshot brings them
    run.wait_event("restarted", lambda e: e["rank"] == 1, timeout=60)
    with Client.at(run.run_dir) as client:
        app = MpwatchApp(client, run.run_dir, glyphs=glyphs.UNICODE, notices=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.snapshots > 0, what="the first snapshot")
            seqs = [e["seq"] for e in app.event_log]
            assert seqs == list(range(1, len(seqs) + 1)) and app.event_log[0]["event"] == "run_started"
            await pilot.press("e")
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), what="the events screen")
            lines = [str(app.screen.list.get_option_at_index(i).prompt) for i in range(app.screen.list.option_count)]
            assert "run started" in lines[0]
            for text in ("rank 0 started (pid", "rank 1 started (pid", "rank 1 restarted (restart 1, on request)",
                         "rank 1 started again"):
                assert any(text in ln for ln in lines), (text, lines)
            await pilot.press("escape")
            # and what happens after: a pause, in the log kept, on the screen when opened again
            run.ctl("pause", "0")
            await until(pilot, lambda: any(e["event"] == "paused" for e in app.event_log), what="the paused event")
            await pilot.press("e")
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), what="the events screen again")
            last = str(app.screen.list.get_option_at_index(app.screen.list.option_count - 1).prompt)
            assert "rank 0 paused" in last
            assert [e["seq"] for e in app.event_log] == list(range(1, len(app.event_log) + 1))
            app.poller.stop()
    run.ctl("stop")
    run.wait_exit(60)
