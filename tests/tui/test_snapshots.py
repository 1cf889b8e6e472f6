"""SVG snapshots of the main screen, the detail view and the quit dialog at 80x24 and
160x48, fed the canned run of tests/tui/canned.py (fixed PIDs, times and losses).
Update with: pytest tests/tui/test_snapshots.py --snapshot-update (then look at them)."""
from __future__ import annotations

import pytest

from mpwatch.tui import glyphs
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.screens.detail import DetailScreen
from tests.tui.canned import CannedSource
from tests.tui.conftest import until

SIZES = [(80, 24), (160, 48)]


def canned_app(g=glyphs.UNICODE):
    return MpwatchApp(CannedSource(), glyphs=g, notices=False)


async def first_snapshot(pilot):
    await until(pilot, lambda: pilot.app.snapshots > 0, what="the canned snapshot")


async def detail_loaded(pilot):
    await first_snapshot(pilot)
    await pilot.press("down", "down", "down")  # rank 1, past rank 0's two children
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, DetailScreen) and pilot.app.screen.loads > 0,
                what="the detail data")


async def quit_dialog(pilot):
    await first_snapshot(pilot)
    await pilot.press("q")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(snap_compare, size):
    assert snap_compare(canned_app(), terminal_size=size, run_before=first_snapshot)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_detail_view(snap_compare, size):
    assert snap_compare(canned_app(), terminal_size=size, run_before=detail_loaded)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_quit_dialog(snap_compare, size):
    assert snap_compare(canned_app(), terminal_size=size, run_before=quit_dialog)


def test_main_screen_ascii(snap_compare):
    """A non-UTF-8 locale: the same screen with ASCII states, sparklines and bars."""
    assert snap_compare(canned_app(glyphs.ASCII), terminal_size=(80, 24), run_before=first_snapshot)
