"""SVG snapshots of the screens at 80x24 and 160x48, fed statuses recorded from real runs
(tests/data/statuses, made by `python -m tests.record`): the main screen and the GPU screen
with 2 and with 8 GPUs, every worker state, a paused rank named as the cause of its peers'
stall, a slow start, 256 ranks, a straggler (its PACE at 160 columns, its detail view), an A100 in MIG mode
seen by a user (issue 33), the detail view with a stalled worker's stacks and a loss
plot in log scale, the help, the logs, the events, the filter, the confirm, restart and quit
dialogs, the banner of a finished run, a node that cannot be reached, the ASCII fallback and
NO_COLOR. After re-recording or a change of the screens:
pytest tests/tui/test_snapshots.py --snapshot-update, then look at every one of them."""
from __future__ import annotations

import pytest

from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.confirm import ChoiceDialog, ConfirmDialog
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.events import EventsScreen
from mpwatch.tui.screens.filter import FilterDialog
from mpwatch.tui.screens.gpu import GpuScreen
from mpwatch.tui.screens.help import HelpScreen
from mpwatch.tui.screens.logs import LogsScreen
from tests.tui.conftest import until
from tests.tui.recorded import RecordedSource

SIZES = [(80, 24), (160, 48)]
size_id = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


def recorded_app(name: str, tmp_path, g=glyphs.UNICODE, **source) -> MpwatchApp:
    src = RecordedSource(name, **source)
    src.materialise(tmp_path)  # the stack dumps, where the detail view reads them
    return MpwatchApp(src, tmp_path, glyphs=g, notices=False)


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


async def restart_dialog(pilot):
    await first_snapshot(pilot)
    await pilot.press("down", "r")  # rank 1 of three in one process group
    await until(pilot, lambda: isinstance(pilot.app.screen, ChoiceDialog), what="the restart dialog")


@size_id
@pytest.mark.parametrize("name", ["gpu2", "gpu8", "states", "paused", "slow", "container", "mnist", "wide", "auto",
                                  "straggler", "mig", "oom"])
def test_main_screen(snap_compare, tmp_path, size, name):
    assert snap_compare(recorded_app(name, tmp_path), terminal_size=size, run_before=first_snapshot)


@size_id
@pytest.mark.parametrize("name", ["gpu2", "gpu8", "mig", "oom"])
def test_gpu_screen(snap_compare, tmp_path, size, name):
    assert snap_compare(recorded_app(name, tmp_path), terminal_size=size, run_before=gpu_screen)


@size_id
def test_detail_view_of_a_stalled_worker(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("states", tmp_path), terminal_size=size, run_before=stalled_detail)


async def straggler_detail(pilot):
    await first_snapshot(pilot)
    await pilot.press("down", "enter")  # rank 1, the straggler
    await until(pilot, lambda: isinstance(pilot.app.screen, DetailScreen) and pilot.app.screen.loads > 0,
                what="the detail data")


@size_id
def test_detail_view_of_the_straggler(snap_compare, tmp_path, size):
    """Issue 32: rank 1's pace (its data against the median rank's) under its title."""
    assert snap_compare(recorded_app("straggler", tmp_path), terminal_size=size, run_before=straggler_detail)


@size_id
def test_restart_dialog_of_a_rank_in_a_process_group(snap_compare, tmp_path, size):
    """The warning before the choice: rank 1 shares a process group; restart all, or only it."""
    assert snap_compare(recorded_app("ddp", tmp_path), terminal_size=size, run_before=restart_dialog)


def test_quit_dialog(snap_compare, tmp_path):
    assert snap_compare(recorded_app("gpu2", tmp_path), terminal_size=(80, 24), run_before=quit_dialog)


def test_main_screen_ascii(snap_compare, tmp_path):
    """A non-UTF-8 locale: the same screen with ASCII states, sparklines and bars."""
    assert snap_compare(recorded_app("gpu2", tmp_path, glyphs.ASCII), terminal_size=(80, 24),
                        run_before=first_snapshot)


@pytest.mark.parametrize(("name", "keys"), [("gpu2", ()), ("gpu2", ("q",)), ("ddp", ("down", "r"))],
                         ids=["main", "quit", "restart"])
def test_a_60x15_terminal_keeps_help_quit_and_whole_dialogs(snap_compare, tmp_path, name, keys):
    """Issue 20: at 60x15 the footer keeps `? Help q Quit`, the table its rows, dialogs their text."""
    async def before(pilot):
        await first_snapshot(pilot)
        await pilot.press(*keys)
        await pilot.pause()
    assert snap_compare(recorded_app(name, tmp_path), terminal_size=(60, 15), run_before=before)


# ------------------------------------------------------ screens and dialogs ----
async def pressed(pilot, keys, screen_type, what: str, ready=None):
    """The first snapshot, then keys, then until the screen on top is screen_type (and ready)."""
    await first_snapshot(pilot)
    await pilot.press(*keys)
    await until(pilot, lambda: isinstance(pilot.app.screen, screen_type)
                and (ready is None or ready(pilot.app.screen)), what=what)
    pilot.app.clear_notifications()
    await pilot.pause()


def test_help(snap_compare, tmp_path):
    async def before(pilot):
        await pressed(pilot, ["question_mark"], HelpScreen, "the help")
    assert snap_compare(recorded_app("gpu2", tmp_path), terminal_size=(80, 40), run_before=before)


def test_logs_of_a_failed_rank(snap_compare, tmp_path):
    """Rank 3 of `states` failed: its stderr (the traceback and the restart marker) first."""
    async def before(pilot):
        await pressed(pilot, ["down", "down", "down", "down", "l"], LogsScreen, "the logs",
                      lambda s: s.loads > 0)
    assert snap_compare(recorded_app("states", tmp_path), terminal_size=(100, 30), run_before=before)


def test_events_of_a_live_run(snap_compare, tmp_path):
    async def before(pilot):
        await pressed(pilot, ["e"], EventsScreen, "the events screen")
    assert snap_compare(recorded_app("states", tmp_path, events=True), terminal_size=(100, 30), run_before=before)


def test_filter_dialog(snap_compare, tmp_path):
    async def before(pilot):
        await pressed(pilot, ["slash", "s", "t", "a", "l", "l"], FilterDialog, "the filter dialog")
    assert snap_compare(recorded_app("states", tmp_path), terminal_size=(80, 24), run_before=before)


def test_confirm_dialog_before_a_kill(snap_compare, tmp_path):
    async def before(pilot):
        await pressed(pilot, ["k"], ConfirmDialog, "the confirm dialog")
    assert snap_compare(recorded_app("gpu2", tmp_path), terminal_size=(80, 24), run_before=before)


def test_finished_banner(snap_compare, tmp_path):
    """The run ends under the TUI (its last status: `ended`'s ranks that exited, were killed,
    could not start): the banner names each one's end."""
    async def before(pilot):
        await first_snapshot(pilot)
        await until(pilot, lambda: not pilot.app.live, what="the run's end")
        await pilot.pause()
    app = recorded_app("ended", tmp_path, ends_after=1)
    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


@size_id
def test_a_node_that_cannot_be_reached(snap_compare, tmp_path, size):
    """The nodes recording once node 1 stopped answering: its ranks unreachable, its line says why."""
    assert snap_compare(recorded_app("nodes", tmp_path, lost=True), terminal_size=size, run_before=first_snapshot)


def test_loss_plot_in_log_scale(snap_compare, tmp_path):
    """Rank 0 of `states`: a loss from 3 down to 0.003 opens on the log scale (it spans 10x)."""
    async def before(pilot):
        await pressed(pilot, ["enter"], DetailScreen, "the detail view", lambda s: s.loads > 0)
    assert snap_compare(recorded_app("states", tmp_path), terminal_size=(120, 40), run_before=before)


def test_no_color(snap_compare, tmp_path, monkeypatch):
    """NO_COLOR: states and alerts still read apart (their glyphs), without colour."""
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(recorded_app("gpu2", tmp_path), terminal_size=(120, 36), run_before=first_snapshot)

