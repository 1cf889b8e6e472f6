"""What the detail and logs views open on (issue 31), fed the mnist demo's recorded run
(tests/data/statuses/mnist.json: its loss from 2.3 down to 3e-4, rank 0's stdout only):
the loss plot opens on the log scale where the loss spans 10x and its label says the scale
shown; the detail view's log boxes show the file's end, not the first lines of a longer
tail; the logs view opens on the stream that has lines (stdout here, where it opened on an
empty stderr). Snapshots and the same facts read off the widgets, at 80x24 and 160x48."""
from __future__ import annotations

import pytest

from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.logs import LogsScreen
from mpwatch.tui.widgets.loss_plot import LossPlot
from tests.tui.conftest import drawn, until
from tests.tui.recorded import recording
from tests.tui.test_snapshots import first_snapshot, recorded_app

SIZES = [(80, 24), (160, 48)]
size_id = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
STDOUT = recording("mnist")["logs"]["0"]["stdout"]


async def detail(pilot):
    await first_snapshot(pilot)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, DetailScreen) and pilot.app.screen.loads > 0,
                what="the detail data")
    await pilot.pause()


async def logs(pilot):
    await first_snapshot(pilot)
    await pilot.press("l")
    await until(pilot, lambda: isinstance(pilot.app.screen, LogsScreen) and pilot.app.screen.loads > 0,
                what="the logs")
    await pilot.pause()


def axis(plot: LossPlot) -> str:
    lines = plot.render_lines(plot.content_region.reset_offset)
    return "".join(s.text for s in lines[-1]) if lines else ""


@size_id
async def test_the_loss_plot_opens_on_the_scale_its_label_says(tmp_path, size):
    app = recorded_app("mnist", tmp_path)
    async with app.run_test(size=size) as pilot:
        await detail(pilot)
        plot = app.screen.query_one(LossPlot)
        assert plot.log_scale, "a loss from 2.3 to 3e-4 opens on the log scale"
        assert "log scale (press y for linear)" in drawn(plot)
        await pilot.press("y")
        await pilot.pause()
        assert not plot.log_scale and "linear scale (press y for log)" in drawn(plot)


@size_id
async def test_the_log_boxes_show_the_end_of_the_file(tmp_path, size):
    app = recorded_app("mnist", tmp_path)
    async with app.run_test(size=size) as pilot:
        await detail(pilot)
        body = app.screen.query_one("#detail-stdout")
        shown = [s.text.rstrip().rstrip("…") for s in body.render_lines(body.content_region.reset_offset)]
        assert 0 < len(shown) <= len(STDOUT), shown  # as many as fit (80x24: fewer than the tail)
        for line, want in zip(shown, STDOUT[-len(shown):], strict=True):  # its end, last line last
            assert want.startswith(line), (shown, STDOUT)
        assert body.parent.max_scroll_y == 0, "every line the box holds is in view"


@size_id
async def test_the_logs_view_opens_on_the_stream_with_lines(tmp_path, size):
    app = recorded_app("mnist", tmp_path)
    async with app.run_test(size=size) as pilot:
        await logs(pilot)
        screen = app.screen
        assert screen.stream == "stdout" and screen._shown == STDOUT
        assert "rank 0 stdout" in drawn(screen.query_one("#logs-title"))


@size_id
def test_detail_view_of_the_mnist_demo(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("mnist", tmp_path), terminal_size=size, run_before=detail)


@size_id
def test_logs_view_of_the_mnist_demo(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("mnist", tmp_path), terminal_size=size, run_before=logs)


def test_first_stream_is_stdout_but_a_failed_ranks_stderr():
    from mpwatch.tui.screens.logs import first_stream
    assert first_stream(["a"], ["b"], failed=False) == "stdout"
    assert first_stream([], ["b"], failed=False) == "stderr"
    assert first_stream(["a"], ["Traceback"], failed=True) == "stderr"
    assert first_stream(["a"], [], failed=True) == "stdout"
    assert first_stream([], [], failed=False) == "stdout"
