"""Toasts and the end of a run (issue 20, item 9), on a real run whose rank 1 fails and which
then ends: at 80x24 no toast covers the table (the status line says each thing), at 160x48 the
failure is a toast; the run's end is said once (the banner, the status line), never as a toast."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from mpwatch.sources.local import Client
from mpwatch.tui import app as app_module
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from tests.documented import TOAST_SIZE
from tests.tui.conftest import WORKER, until
from tests.tui.recorded import RecordedSource


class Watched(MpwatchApp):
    """The App, with the toasts it shows written down (Textual's own notify still shows them)."""

    CSS_PATH = Path(app_module.__file__).parent / "app.tcss"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.toasts: list[str] = []

    def notify(self, message, **kw):
        self.toasts.append(str(message))
        super().notify(message, **kw)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_toasts_leave_the_table_in_view_and_the_end_is_said_once(headless, size):
    # a cause that reads as markup (gloo's source location): shown as it is, never parsed
    env = dict(os.environ, STEPS="60", FAIL_RANK="1", FAIL_AT="30", FAIL_MSG="[/w/gloo/pair.cc:545] Read error [x]")
    run = headless(WORKER, n=2, env=env)
    client = Client.at(run.run_dir)
    app = Watched(client, run.run_dir, glyphs=glyphs.UNICODE, notices=True)
    try:
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: not app.live, 60, what="the run to end")
            # The end is the poller's last message (RunGone, posted as its thread returns): once
            # the thread has ended and the messages it posted are handled, nothing more is said.
            app.poller.join(30)
            assert not app.poller._thread.is_alive()
            await pilot.pause()
            ends = [text for text, _ in app.messages if text.startswith("run ended")]
            assert len(ends) == 1, app.messages
            assert "run ended: " in str(app.query_one("#banner").render())
            assert app.messages[-1][0].startswith("run ended: ")  # the status line's last word
    finally:
        client.close()
    assert not any("run ended" in t for t in app.toasts)
    if size == (80, 24):
        assert app.toasts == []
    else:
        assert any("rank 1 failed: exit 1: RuntimeError: Read error [x]" in t for t in app.toasts), app.toasts


@pytest.mark.parametrize("size", [(TOAST_SIZE[0] - 1, TOAST_SIZE[1]), (TOAST_SIZE[0], TOAST_SIZE[1] - 1),
                                  TOAST_SIZE], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_toast_shows_from_the_documented_size(size):
    """README: toasts show only where they leave the table in view (120x36 and more)."""
    app = Watched(RecordedSource("states"), None, glyphs=glyphs.UNICODE, notices=True)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.snapshots > 0, 30, what="the first snapshot")
        app.say("rank 3 failed: exit 1", "error")
        await pilot.pause()
        said = app.messages[-1][0]
    assert said == "rank 3 failed: exit 1"  # the status line says it at every size
    assert ("rank 3 failed: exit 1" in app.toasts) == (size == TOAST_SIZE), (size, app.toasts)


async def test_a_pollers_last_message_after_the_app_closed_is_let_go():
    """A poller's message that lands as the app quits, its screens gone (the run's end, seen as the
    source closes under it), is let go: it raised ScreenStackError into a fresh-clone suite once."""
    from mpwatch.tui.poller import PollFailed, RunGone

    app = MpwatchApp(RecordedSource("states"), None, glyphs=glyphs.UNICODE, notices=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.live
    assert not app.screen_stack
    app.on_run_gone(RunGone(None, {"finished": True, "exit_code": 0}, "the run ended"))
    app.on_poll_failed(PollFailed("the socket closed"))
    assert not app.live
