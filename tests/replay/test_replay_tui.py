"""The replay in the TUI (Textual's run_test), on run directories a real supervisor wrote:
the cursor keys move the moment the table, GPU panel, alerts, strip, detail view and events
screen show; the keys that act are refused; `q` leaves. And SVG snapshots of the replay
screen at 80x24 and 160x48 (after a change: --snapshot-update, then look at each)."""
from __future__ import annotations

import shutil

import pytest
from textual.widgets import Input

from mpwatch.contract import State
from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.render import glyphs
from mpwatch.tui.render.segs import plain
from mpwatch.tui.replay_app import ReplayApp
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.events import EventsScreen
from mpwatch.tui.screens.filter import FilterDialog
from mpwatch.tui.screens.help import HelpScreen
from tests.replay.conftest import STORED_FAILED, STORED_HANG, STORED_OOM
from tests.tui.conftest import drawn, said, until, worker_of

SIZES = [(80, 24), (160, 48)]


def app_on(path) -> ReplayApp:
    return ReplayApp(ReplaySource(path), glyphs=glyphs.UNICODE, notices=False)


async def ready(pilot):
    await until(pilot, lambda: pilot.app.snapshots > 0, what="the first status")


async def key(pilot, name: str):
    """Press a cursor key and wait for the status of the new moment."""
    app = pilot.app
    before = (app.replay.where()[0], app.snapshots)
    await pilot.press(name)
    if app.replay.where()[0] != before[0]:
        await until(pilot, lambda: app.shows_cursor() and app.snapshots > before[1], what=f"the moment after {name}")


def strip_text(app) -> str:
    return "\n".join(plain(line) for line in app.strip._lines or [])


async def test_the_cursor_keys_walk_the_hang():
    app = app_on(STORED_HANG)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        n = len(app.replay.events_list)
        assert app.replay.where()[0] == n and "the end" in strip_text(app)
        assert all(w["state"] == State.KILLED for w in app.status["workers"])
        await key(pilot, "left_square_bracket")  # back to the last alert: the culprit with its frame
        assert app.replay.where()[2]["event"] == "alert"
        assert all(w["state"] == State.STALLED for w in app.status["workers"])
        assert "alert (updated): ranks 0,2 wait in all_reduce at step 5 for rank 1," in strip_text(app)
        assert "for rank 1, which is at step 4 (in hang_here" in app.status["straggler"]["text"]
        assert any("for rank 1, which is at step 4" in plain(line) for line in app.alert_lines._lines)
        await key(pilot, "comma")
        await key(pilot, "full_stop")
        assert app.replay.where()[2]["event"] == "alert"
        await key(pilot, "home")
        assert app.replay.where()[0] == 0 and app.status["run"]["uptime"] == 0.0
        await key(pilot, "right_square_bracket")
        assert app.replay.where()[2]["event"] == "stalled"
        await key(pilot, "end")
        assert app.replay.where()[0] == n
        await pilot.press("full_stop")
        assert said(app, "at the end")


async def test_the_detail_view_shows_the_stack_dump_of_the_moment():
    app = app_on(STORED_HANG)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await key(pilot, "left_square_bracket")  # the culprit named: rank 1 waits in hang_here
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.loads > 0, what="the detail")
        screen = app.screen
        assert screen.rank == 1
        dump = str(screen.query_one("#detail-dump").render())
        when = worker_of(app, 1)["last_dump"].rsplit("-", 2)[1]  # the dump file's time: HHMMSS
        assert "> hang_here  hang.py:28" in dump and f"at {when[:2]}:{when[2:4]}:{when[4:]}" in dump
        loads = screen.loads
        # back to the event before rank 1's dump (the ranks' dumps come in the order their stalls
        # were found): no dump then, and a replay offers no key to take one
        events = app.replay.files.events
        dumped = next(i for i, e in enumerate(events) if e["event"] == "dump" and e["rank"] == 1)
        for _ in range(app.replay.where()[0] - (dumped - 1)):
            await pilot.press("comma")
        await until(pilot, lambda: screen.loads > loads and "no stack dump at this moment" in str(
            screen.query_one("#detail-dump").render()), what="no dump before it")
        assert worker_of(app, 1)["last_dump"] is None
        keys = {k for k, b in app.screen.active_bindings.items() if b.binding.show}
        assert not keys & {"p", "d", "k", "r"}, keys


async def test_the_events_screen_moves_the_cursor():
    app = app_on(STORED_HANG)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, EventsScreen), what="the events screen")
        opts = app.screen.list
        assert opts.option_count == len(app.replay.events_list)
        assert "run started" in str(opts.get_option_at_index(0).prompt)
        assert "rank 0 started (pid" in str(opts.get_option_at_index(1).prompt)
        first = next(i for i, e in enumerate(app.replay.events_list) if e["event"] == "stalled")
        opts.highlighted = first  # the first stall
        await pilot.press("enter")
        await until(pilot, lambda: app.replay.where()[0] == first and app.shows_cursor(),
                    what="the cursor on the chosen event")
        assert worker_of(app, app.replay.events_list[first]["rank"])["state"] == State.STALLED


async def test_a_dialog_keeps_the_cursor_keys_for_its_input():
    app = app_on(STORED_HANG)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        at = app.replay.where()[0]
        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.screen, FilterDialog), what="the filter dialog")
        await pilot.press("1", "comma", "left_square_bracket", "home", "end")
        assert app.screen.query_one(Input).value == "1,["
        assert app.replay.where()[0] == at and app.moves == 0


async def test_keys_that_act_are_refused_and_q_leaves():
    app = app_on(STORED_OOM)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        for k in ("p", "k", "plus", "d"):
            await pilot.press(k)
        assert said(app, "cannot pause: this is a replay") and said(app, "cannot resize: this is a replay")
        assert said(app, "cannot kill: this is a replay") and said(app, "cannot dump stacks: this is a replay")
        assert not app.screen_stack[1:]  # no confirmation dialog was opened
        # the footer offers the cursor's keys, not the live run's actions
        footer = {b.key for _, b, enabled, _ in app.active_bindings.values() if b.show and enabled}
        assert {"question_mark", "q"} <= footer  # the cursor's keys are on the strip above it
        assert not footer & {"p", "k", "d", "r", "R", "plus", "minus"}
        await pilot.press("q")
    assert app.return_value is not None and app.return_value.kind == "finished"


async def moment_of_the_culprit(pilot):
    await ready(pilot)
    await key(pilot, "left_square_bracket")


async def moment_of_the_oom(pilot):
    await ready(pilot)
    await key(pilot, "left_square_bracket")  # the OOM alert: the last marked moment before the end
    await key(pilot, "left_square_bracket")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_the_hang_at_its_culprit(snap_compare, size):
    assert snap_compare(app_on(STORED_HANG), terminal_size=size, run_before=moment_of_the_culprit)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_the_oom_at_its_failure(snap_compare, size):
    assert snap_compare(app_on(STORED_OOM), terminal_size=size, run_before=moment_of_the_oom)


async def test_a_failed_run_opens_on_its_first_failure_when_its_first_status_comes_before_the_columns():
    """The first status can come before the first resize has given the table its columns (nothing
    orders the poller's first snapshot after Textual's first Resize): its rows then come with the
    resize, and the selection of the first failure, made at the first status, found no row and the
    replay opened on rank 0. Forced here in that order."""
    app = app_on(STORED_FAILED)
    real = app._set_columns
    app._set_columns = lambda width: None  # no columns yet: as before the first resize
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        assert not app.table.cols  # the first status found no columns: the race, as it happens
        app._set_columns = real
        await pilot.resize_terminal(101, 30)  # the resize that comes after it
        await until(pilot, lambda: app.table.cols and app.table.order, what="the rows")
        assert app.table.selected_rank() == 1


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_failed_run_opens_on_its_first_failure_and_its_cause(size):
    """Issue 20: rank 1 raised ValueError, rank 0 exited 0. The first screen selects rank 1 and
    shows why; the columns a replay cannot know give their width to the cause; nothing offers
    an action (the help neither)."""
    app = app_on(STORED_FAILED)
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        assert app.table.selected_rank() == 1
        keys = [c.key for c in app.table.cols]
        assert not set(keys) & {"speed", "hb", "cpu", "rss", "phases"} and keys[-1] == "note"
        note = app.table.get_row("w1")[keys.index("note")].plain.strip()
        assert note.startswith("exit 1: ValueError: bad batch at step"), note
        assert "exit 1: ValueError: bad batch at step 12" in str(app.selected_line.render())
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        help_text = drawn(app.screen.query_one("Static"))
        assert "Read-only" in help_text and "pause or resume" not in help_text and "kill the selected" not in help_text


async def first_screen(pilot):
    await ready(pilot)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_a_failed_run_at_its_first_screen(snap_compare, size):
    assert snap_compare(app_on(STORED_FAILED), terminal_size=size, run_before=first_screen)


def test_snapshot_the_events_screen_at_the_culprit(snap_compare):
    """The replay's events screen with the cursor at the finding: the events after it dim."""
    async def before(pilot):
        await ready(pilot)
        await key(pilot, "left_square_bracket")
        await pilot.press("e")
        await until(pilot, lambda: isinstance(pilot.app.screen, EventsScreen), what="the events screen")
        await pilot.pause()
    assert snap_compare(app_on(STORED_HANG), terminal_size=(120, 40), run_before=before)


def test_snapshot_the_notes_banner_of_a_run_cut_short(snap_compare, tmp_path):
    """The stored hang as a killed supervisor leaves it: no final.json, a torn last event."""
    d = shutil.copytree(STORED_HANG, tmp_path / "hang")
    (d / "final.json").unlink()
    events = d / "events.jsonl"
    events.write_bytes(events.read_bytes()[:-40])
    app = app_on(d)
    assert len(app.replay.notes) == 2
    assert snap_compare(app, terminal_size=(100, 30), run_before=ready)
