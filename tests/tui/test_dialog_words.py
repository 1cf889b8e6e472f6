"""The checkpoint dialog's sentence parses (issue 31): it read "mpwatch.should_checkpoint()
returns True once in the training loop; / asked of all ranks, at the same step on every one."
over two labels, and its warning was cut at the dialog's edge; the tunables screen's title is
whole at 80 columns. Fed the gpu2 recording (its ranks never called should_checkpoint(): the
warning shows), at 80x24 and 160x48."""
from __future__ import annotations

import pytest

from mpwatch.tui.screens.checkpoint import CheckpointDialog
from mpwatch.tui.screens.tunables import TunablesScreen
from tests.tui.conftest import until
from tests.tui.test_scrollbars import screen_text
from tests.tui.test_snapshots import first_snapshot, recorded_app

SIZES = [(80, 24), (160, 48)]
size_id = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
SENTENCE = ("mpwatch.should_checkpoint() returns True once in the training loop, at a step mpwatch picks: "
            "on rank 0 alone, or on every rank at the same step.")
WARNING = "Rank 0 has not called mpwatch.should_checkpoint() yet: it answers when it does."


async def checkpoint_dialog(pilot):
    await first_snapshot(pilot)
    await pilot.press("c")
    await until(pilot, lambda: isinstance(pilot.app.screen, CheckpointDialog), what="the checkpoint dialog")
    await pilot.pause()


def dialog_lines(app) -> str:
    """The dialog's text as drawn, its lines joined: inside its borders (█), words whole."""
    inside = [line.split("█")[1].strip() for line in screen_text(app).splitlines() if line.count("█") >= 2]
    return " ".join(x for x in inside if x)


@size_id
async def test_the_checkpoint_dialog_says_one_whole_sentence(tmp_path, size):
    app = recorded_app("gpu2", tmp_path)
    async with app.run_test(size=size) as pilot:
        await checkpoint_dialog(pilot)
        text = dialog_lines(app)
    assert SENTENCE in text and WARNING in text, text


@size_id
def test_checkpoint_dialog(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("gpu2", tmp_path), terminal_size=size, run_before=checkpoint_dialog)


@size_id
async def test_the_tunables_title_is_whole(tmp_path, size):
    """It was cut at 80 columns ('... at one step) · Esc:')."""
    app = recorded_app("gpu2", tmp_path)
    async with app.run_test(size=size) as pilot:
        await first_snapshot(pilot)
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TunablesScreen), what="the tunables screen")
        await pilot.pause()
        title = screen_text(app).splitlines()[0].strip()
    assert title == "tunables: 0 · Enter: change one, on every rank at one step · Esc: back", title
