"""SVG snapshots of the screens at 80x24 and 160x48, fed statuses recorded from real runs
(tests/data/statuses, made by `python -m tests.record`): the main screen and the GPU screen
with 2 and with 8 GPUs, every worker state, the detail view with a stalled worker's stacks,
the quit dialog, and the ASCII fallback. After re-recording or a change of the screens:
pytest tests/tui/test_snapshots.py --snapshot-update, then look at every one of them."""
from __future__ import annotations

import pytest

from mpwatch.tui.render import glyphs
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.gpu import GpuScreen
from tests.tui.conftest import until
from tests.tui.recorded import RecordedSource

SIZES = [(80, 24), (160, 48)]
size_id = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


def recorded_app(name: str, tmp_path, g=glyphs.UNICODE) -> MpwatchApp:
    source = RecordedSource(name)
    source.materialise(tmp_path)  # the stack dumps, where the detail view reads them
    return MpwatchApp(source, tmp_path, glyphs=g, notices=False)


async def first_snapshot(pilot):
    await until(pilot, lambda: pilot.app.snapshots > 0, what="the recorded snapshot")


async def gpu_screen(pilot):
    await first_snapshot(pilot)
    await pilot.press("g")
    await until(pilot, lambda: isinstance(pilot.app.screen, GpuScreen) and pilot.app.screen.loads > 0,
                what="the GPU timeline")


async def stalled_detail(pilot):
    await first_snapshot(pilot)
    await pilot.press("down", "down")  # rank 1 (stalled), past rank 0's child
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, DetailScreen) and pilot.app.screen.loads > 0,
                what="the detail data")


async def quit_dialog(pilot):
    await first_snapshot(pilot)
    await pilot.press("q")


@size_id
@pytest.mark.parametrize("name", ["gpu2", "gpu8", "states", "auto"])
def test_main_screen(snap_compare, tmp_path, size, name):
    assert snap_compare(recorded_app(name, tmp_path), terminal_size=size, run_before=first_snapshot)


@size_id
@pytest.mark.parametrize("name", ["gpu2", "gpu8"])
def test_gpu_screen(snap_compare, tmp_path, size, name):
    assert snap_compare(recorded_app(name, tmp_path), terminal_size=size, run_before=gpu_screen)


@size_id
def test_detail_view_of_a_stalled_worker(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("states", tmp_path), terminal_size=size, run_before=stalled_detail)


def test_quit_dialog(snap_compare, tmp_path):
    assert snap_compare(recorded_app("gpu2", tmp_path), terminal_size=(80, 24), run_before=quit_dialog)


def test_main_screen_ascii(snap_compare, tmp_path):
    """A non-UTF-8 locale: the same screen with ASCII states, sparklines and bars."""
    assert snap_compare(recorded_app("gpu2", tmp_path, glyphs.ASCII), terminal_size=(80, 24),
                        run_before=first_snapshot)
