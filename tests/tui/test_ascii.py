"""LANG=C or MPWATCH_ASCII=1 (issue 20, item 9): every screen draws ASCII only, the footer's
Enter, the borders, scrollbars, cut lines and the separators included, fed recorded statuses."""
from __future__ import annotations

import html
import re

import pytest

from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.gpu import GpuScreen
from tests.tui.conftest import until
from tests.tui.test_snapshots import first_snapshot, recorded_app

_TEXT = re.compile(r'<text [^>]*y="([\d.]+)"[^>]*>(.*?)</text>')


def screen_text(app) -> str:
    """What the terminal shows, line by line, from Textual's own screenshot (its SVG's text runs)."""
    rows: dict[float, list[str]] = {}
    for y, t in _TEXT.findall(app.export_screenshot()):
        rows.setdefault(float(y), []).append(html.unescape(t).replace("\xa0", " "))
    return "\n".join("".join(rows[y]) for y in sorted(rows))


def non_ascii(text: str) -> set[str]:
    return {c for c in text if ord(c) > 127}


@pytest.mark.parametrize("name", ["gpu2", "states", "paused"])
async def test_every_screen_is_ascii(tmp_path, name):
    app = recorded_app(name, tmp_path, glyphs.ASCII)
    async with app.run_test(size=(80, 24)) as pilot:
        await first_snapshot(pilot)
        await until(pilot, lambda: "Detail" in screen_text(app), what="the footer drawn")
        seen = {"main": screen_text(app)}
        await pilot.press("question_mark")
        await pilot.pause()
        seen["help"] = screen_text(app)
        await pilot.press("escape", "q")
        await pilot.pause()
        seen["quit"] = screen_text(app)
        await pilot.press("escape", "down", "enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.loads > 0, what="the detail")
        seen["detail"] = screen_text(app)
        await pilot.press("escape")
        if app.status["gpus"]:
            await pilot.press("g")
            await until(pilot, lambda: isinstance(app.screen, GpuScreen) and app.screen.loads > 0, what="GPUs")
            seen["gpus"] = screen_text(app)
    assert "Enter" in seen["main"]
    for where, text in seen.items():
        assert not non_ascii(text), (where, sorted(non_ascii(text)))


@pytest.mark.parametrize(("name", "keys", "whole"), [
    ("gpu2", (), ["? Help", "q Quit", " 1     ● running"]),
    ("gpu2", ("q",), ["again.", "end the run.", "[d] Detach", "[s] Stop the run", "[c] Cancel"]),
    ("ddp", ("down", "r"), ["the group anew.", "[a] Restart all 3", "[o] Only rank 1", "[n] Cancel"])])
async def test_a_60x15_terminal_keeps_help_quit_and_whole_dialogs(tmp_path, name, keys, whole):
    app = recorded_app(name, tmp_path, glyphs.UNICODE)
    async with app.run_test(size=(60, 15)) as pilot:
        await first_snapshot(pilot)
        await until(pilot, lambda: "Detail" in screen_text(app), what="the footer drawn")
        await pilot.press(*keys)
        await pilot.pause()
        text = screen_text(app)
    for words in whole:
        assert words in text, (words, text)
