"""The footer shows c and t (issue 31) and only whole keys: the key table's shown keys in its
order, compact, as many as fit; ? and q first, so they stay at 60 columns; at 80 columns c and
t are there (they never were). A live run (the gpu2 recording) and a replay (a real hang's run
directory), whose footer has no key that acts (c) but has t (the moment's tunables, read-only)."""
from __future__ import annotations

import pytest

from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.render import glyphs
from mpwatch.tui.replay_app import ReplayApp
from mpwatch.tui.screens.detail import DetailScreen
from tests.replay.conftest import STORED_HANG
from tests.tui.conftest import until
from tests.tui.test_scrollbars import screen_text
from tests.tui.test_snapshots import recorded_app

LIVE = ["⏎ Detail", "? Help", "q Quit", "g GPUs", "p Pause", "k Kill", "c Checkpoint", "t Tunables", "l Logs",
        "d Dump", "/ Filter"]
REPLAY = ["⏎ Detail", "? Help", "q Quit", "g GPUs", "t Tunables", "l Logs", "/ Filter"]
DETAIL = ["esc Back", "y Log/linear", "p Pause/resume", "d Dump stacks", "k Kill", "r Restart", "l Logs"]


def footer(app) -> str:
    return screen_text(app).rstrip("\n").splitlines()[-1].strip()


def whole(shown: str, keys: list[str]) -> int:
    """How many of `keys` the footer shows, in order, each whole and nothing else (0: not so)."""
    return next((n for n in range(len(keys), 0, -1) if shown == " ".join(keys[:n])), 0)


async def footer_of(pilot, keys: list[str], least: int) -> str:
    """The footer once it shows at least `least` of `keys` whole (it is fitted after a
    refresh); fails with what it showed."""
    app = pilot.app
    try:
        await until(pilot, lambda: whole(footer(app), keys) >= least, timeout=10, what="the footer")
    except AssertionError:
        raise AssertionError(f"the footer {footer(app)!r} is not the first {least}+ keys of {keys}, "
                             "whole") from None
    return footer(app)


@pytest.mark.parametrize(("size", "least"), [((60, 15), 3), ((80, 24), 9), ((160, 48), len(LIVE))],
                         ids=["60x15", "80x24", "160x48"])
async def test_the_footer_shows_whole_keys_and_c_and_t_at_80_columns(tmp_path, size, least):
    app = recorded_app("gpu2", tmp_path)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the recorded snapshot")
        await footer_of(pilot, LIVE, least)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_replays_footer_has_t_and_no_key_that_acts(size):
    app = ReplayApp(ReplaySource(STORED_HANG), glyphs=glyphs.UNICODE, notices=False)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the first status")
        await footer_of(pilot, REPLAY, len(REPLAY))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_detail_views_footer_shows_whole_keys(tmp_path, size):
    """It cut 'l Logs' to 'l Log' at 80 columns."""
    app = recorded_app("gpu2", tmp_path)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the recorded snapshot")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.loads > 0,
                    what="the detail")
        await footer_of(pilot, DETAIL, len(DETAIL))
