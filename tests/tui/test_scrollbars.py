"""No stray scrollbar ends (issue 31): at 80x24 the worker table (its columns scroll into view)
and the logs view (lines wider than the screen) have a horizontal scrollbar, whose thumb
Textual ends with an eighth block: read as text, or on a terminal of few colours, a lone ▉
in mid-screen. Their thumbs end on whole cells. Fed the mnist demo's recording, at 80x24
and 160x48."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from mpwatch.tui.screens.logs import LogsScreen
from tests.tui.conftest import until
from tests.tui.test_snapshots import first_snapshot, recorded_app

SIZES = [(80, 24), (160, 48)]
EIGHTHS = set("▉▊▋▌▍▎▏")  # Textual's horizontal thumb ends


def screen_text(app) -> str:
    """The screen as a terminal shows it, without colour."""
    console = Console(record=True, width=app.size.width, file=io.StringIO(), color_system=None)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_no_lone_scrollbar_end_under_the_table_or_a_log(tmp_path, size):
    app = recorded_app("mnist", tmp_path)
    async with app.run_test(size=size) as pilot:
        await first_snapshot(pilot)
        await pilot.pause()
        if size == (80, 24):
            assert app.table.max_scroll_x > 0, "the table's columns scroll into view at 80 columns"
        text = screen_text(app)
        assert not EIGHTHS & set(text), text
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen) and app.screen.loads > 0,
                    what="the logs")
        await pilot.pause()
        text = screen_text(app)
        assert "step 150 epoch 0" in text and not EIGHTHS & set(text), text
