"""The one key table (tui.keys) feeds the footer, the help and the command palette: the help
lists exactly its keys, the palette offers the same actions and runs them, and where nothing can
be acted on (a replay, a run that has ended) neither offers a key that acts. Real Apps driven by
run_test(), fed a status recorded from a real run and a run directory a real supervisor wrote."""
from __future__ import annotations

from textual.app import App
from textual.command import CommandPalette
from textual.geometry import Region
from textual.widgets import Static

from mpwatch.sources.replay import ReplaySource
from mpwatch.tui import keys
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.replay_app import ReplayApp
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.events import EventsScreen
from mpwatch.tui.screens.help import KEY_W, HelpScreen
from tests.replay.conftest import STORED_HANG
from tests.tui.conftest import until
from tests.tui.recorded import RecordedSource

WANTED_ACTING = {"pause", "pause_all", "kill", "restart", "restart_all", "grow", "shrink", "dump",
                 "checkpoint", "profile", "memory"}


def live_app(**source) -> MpwatchApp:
    return MpwatchApp(RecordedSource("gpu2", **source), None, glyphs=glyphs.UNICODE, notices=False)


def replay_app() -> ReplayApp:
    return ReplayApp(ReplaySource(STORED_HANG), glyphs=glyphs.UNICODE, notices=False)


async def help_rows(pilot) -> list[tuple[str, str]]:
    """The key rows the help screen shows, as drawn at its width: from under its title to the
    first blank line; a line wrapped under the text column joins its row."""
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), what="the help")
    static = pilot.app.screen.query_one(Static)
    lines = [strip.text.rstrip() for strip in static.render_lines(Region(0, 0, *static.size))]
    assert lines[0] == "mpwatch keys" and lines[1] == ""
    rows: list[tuple[str, str]] = []
    for line in lines[2:]:
        if not line:
            break
        key, what = line[2:2 + KEY_W].strip(), line[3 + KEY_W:].strip()
        if key:
            rows.append((key, what))
        else:
            rows[-1] = (rows[-1][0], f"{rows[-1][1]} {what}")
    await pilot.press("escape")
    return rows


def footer(app) -> list[str]:
    """The App's own bindings the footer shows, in its order (the focused table adds its own)."""
    return [b.binding.action for b in app.screen.active_bindings.values()
            if b.binding.show and b.enabled and b.node is app]


def table_rows(app, table) -> list[tuple[str, str]]:
    """The rows the table says the help shows: where nothing can act, a key's read-only sentence."""
    return [(app.get_key_display(k), keys.said(k, app.can_act)) for k in table]


def palette(app) -> list[tuple[str, str]]:
    """The palette's commands that are mpwatch's own (after Textual's: Theme, Keys...)."""
    textual = [c.title for c in App.get_system_commands(app, app.screen) if c.title != "Quit"]
    commands = list(app.get_system_commands(app.screen))
    assert [c.title for c in commands[:len(textual)]] == textual  # Textual's Quit would skip the dialog
    return [(c.title, c.help) for c in commands[len(textual):]]


def test_the_keys_that_act_are_flagged_in_the_table():
    assert keys.ACTING == WANTED_ACTING
    assert {k.action for k in keys.CURSOR if k.acts} == set()
    # every key once; every action the App has
    bound = [k.key for k in keys.LIVE + keys.CURSOR]
    assert len(bound) == len(set(bound))
    for k in keys.LIVE:
        assert callable(getattr(MpwatchApp, f"action_{k.action}")), k.action
    assert all(k.description and k.tooltip for k in keys.LIVE + keys.CURSOR)



def test_the_detail_view_binds_the_tables_keys():
    """Its keys of the main screen are LIVE's (the same key acts, the same sentence), on its one
    worker; it binds no other key table."""
    assert list(keys.DETAIL) == DetailScreen.BINDINGS
    live = {k.key: k for k in keys.LIVE}
    shared = [k for k in keys.DETAIL if k.key in live]
    assert [k.key for k in shared] == ["p", "d", "k", "r", "l"]
    for k in shared:
        main = live[k.key]
        assert (k.acts, k.tooltip) == (main.acts, main.tooltip)
        assert k.action == (f"act('{main.action}')" if main.acts else f"app.{main.action}")

async def test_the_live_help_and_palette_offer_exactly_the_table():
    app = live_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the recorded snapshot")
        assert app.can_act
        assert await help_rows(pilot) == table_rows(app, keys.LIVE)
        assert palette(app) == [(k.description, f"{k.tooltip} ({app.get_key_display(k)})") for k in keys.LIVE]
        live_t = "tunables: mpwatch.tunable() values and changes; Enter sets one"
        assert ("t", live_t) in table_rows(app, keys.LIVE)
        # The footer shows the table's shown keys, ? and q first.
        assert footer(app)[:2] == ["help", "quit_dialog"]
        assert set(footer(app)) == {k.action for k in keys.LIVE if k.show}
        # A palette entry runs its key's action.
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press(*"Events", "enter")
        await until(pilot, lambda: isinstance(app.screen, EventsScreen), what="the events screen (palette)")


async def test_a_run_that_has_ended_offers_no_key_that_acts():
    app = live_app(ends_after=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: not app.live, what="the run to end")
        offered = [k for k in keys.LIVE if k.action not in WANTED_ACTING]
        assert await help_rows(pilot) == table_rows(app, offered)
        assert [t for t, _ in palette(app)] == [k.description for k in offered]
        assert footer(app) and not set(footer(app)) & WANTED_ACTING


async def test_a_replay_offers_its_cursor_and_no_key_that_acts():
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the first status")
        offered = [k for k in keys.LIVE if k.action not in WANTED_ACTING] + list(keys.CURSOR)
        rows = await help_rows(pilot)
        assert rows == table_rows(app, offered)
        assert not {"c", "p", "k", "d", "+", "-"} & {key for key, _ in rows}
        # t shows the moment's tunables, and its line says so: nothing is set here (issue 31; a
        # change is refused: tests/replay/test_control_replay.py)
        assert {",", ".", "[", "]", "Home", "End", "t"} <= {key for key, _ in rows}
        (t,) = [what for key, what in rows if key == "t"]
        assert t == "tunables as of the moment shown: mpwatch.tunable() values and changes (read-only)"
        assert [t for t, _ in palette(app)] == [k.description for k in offered]
        assert footer(app) and not set(footer(app)) & WANTED_ACTING
        # The cursor from the palette.
        pos = app.replay.where()[0]
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press(*"Step back", "enter")
        await until(pilot, lambda: app.replay.where()[0] == pos - 1, what="a step back (palette)")
