"""Every key of the TUI, pressed with Pilot against a real supervisor running
tests/fixtures/tui_worker.py. Effects are checked where they happen: the supervisor's
events.jsonl for actions, the app's table and messages for what the user sees."""
from __future__ import annotations

from textual.command import CommandList, CommandPalette

from mpwatch.tui.outcome import Outcome
from mpwatch.tui.screens.confirm import ConfirmDialog
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.filter import FilterDialog
from mpwatch.tui.screens.help import HelpScreen
from mpwatch.tui.screens.logs import LogsScreen
from mpwatch.tui.screens.quit import QuitDialog
from mpwatch.tui.widgets.loss_plot import LossPlot
from tests.helpers import alive, assert_gone
from tests.tui.conftest import said, until, worker_of


async def test_table_shows_workers_and_updates_cells(tui):
    async with tui(n=2) as (app, pilot, run):
        table = app.table
        assert table.order[:2] == ["w0", "w1"]
        before = table.cells_updated
        step0 = worker_of(app, 0)["step"]
        await until(pilot, lambda: worker_of(app, 0)["step"] > step0 + 5, what="steps to advance")
        await until(pilot, lambda: table.cells_updated > before, what="cells to update")
        row = [c.plain for c in table.get_row("w0")]
        keys = [c.key for c in table.cols]
        assert row[keys.index("state")] == "● running"
        assert row[keys.index("step")] == str(worker_of(app, 0)["step"])  # the cell shows the status it has
        assert table.rebuilds == 1  # the first fill; later snapshots only patch cells
        header = str(app.query_one("#header").render())
        run_id = run.status()["run"]["id"]
        assert run_id != run.run_dir.name and run_id in header and "tui_worker.py" in header
        gpu_text = str(app.gpu_panel.body.render())
        assert app.status["gpu_status"] and f"GPU: {app.status['gpu_status']}" in gpu_text


async def test_p_pauses_and_resumes_the_selected_worker(tui):
    async with tui(n=2) as (app, pilot, run):
        await pilot.press("j")  # cursor to rank 1
        assert app.table.selected_rank() == 1
        await pilot.press("p")
        await until(pilot, lambda: said(app, "paused rank 1"), what="the pause message")
        run.wait_event("paused", lambda r: r["rank"] == 1)
        await until(pilot, lambda: worker_of(app, 1)["state"] == "paused", what="rank 1 paused on screen")
        assert "‖ paused" in [c.plain for c in app.table.get_row("w1")]
        assert worker_of(app, 0)["state"] == "running"
        await pilot.press("p")
        await until(pilot, lambda: said(app, "resumed rank 1"), what="the resume message")
        run.wait_event("resumed", lambda r: r["rank"] == 1)


async def test_p_twice_resumes_what_it_paused_before_any_new_snapshot(tui):
    async with tui(n=1) as (app, pilot, run):
        app.poller.stop()  # no snapshot from here on: the screen can only follow the replies
        app.poller.join(30)
        await pilot.pause()  # a snapshot posted just before the stop is applied now
        snapshots = app.snapshots
        await pilot.press("p")
        await until(pilot, lambda: said(app, "paused rank 0"), what="the pause message")
        assert worker_of(app, 0)["state"] == "paused"
        assert "‖ paused" in [c.plain for c in app.table.get_row("w0")]
        await pilot.press("p")
        await until(pilot, lambda: said(app, "resumed rank 0"), what="the resume message")
        run.wait_event("resumed", lambda r: r["rank"] == 0)
        assert app.snapshots == snapshots


async def test_shift_p_pauses_and_resumes_all(tui):
    async with tui(n=2) as (app, pilot, run):
        await pilot.press("P")
        run.wait_event("paused", count=2)
        await until(pilot, lambda: all(w["state"] == "paused" for w in app.status["workers"]),
                    what="all paused on screen")
        # The same action from the command palette (Ctrl+P), by name.
        await pilot.press("ctrl+p")
        await pilot.press(*"Pause / resume all")
        palette = app.screen
        assert isinstance(palette, CommandPalette)

        def offered() -> bool:  # the palette searches in a worker: its hit, highlighted, comes later
            hits = palette.query_one(CommandList)
            return hits.highlighted is not None and "Pause / resume all" in str(
                hits.get_option_at_index(hits.highlighted).prompt)
        await until(pilot, offered, what="the palette offering 'Pause / resume all'")
        await pilot.press("enter")
        run.wait_event("resumed", count=2)
        await until(pilot, lambda: said(app, "resumed rank 0") and said(app, "resumed rank 1"),
                    what="the resume-all message")


async def test_k_asks_then_kills_and_a_refused_action_says_why(tui):
    async with tui(n=2, opts=["--grace", "2"]) as (app, pilot, run):
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmDialog)
        assert said(app, "kill of rank 0 cancelled")
        assert not run.events("worker_exited")
        await pilot.press("k")
        await pilot.press("y")
        run.wait_event("worker_exited", lambda r: r["rank"] == 0 and r["state"] == "killed")
        await until(pilot, lambda: said(app, "killing rank 0"), what="the kill message")
        await until(pilot, lambda: worker_of(app, 0)["state"] == "killed", what="rank 0 killed on screen")
        await until(pilot, lambda: said(app, "rank 0 killed"), what="the alert for the exit")
        # Pausing a dead worker fails, and the message says why.
        await pilot.press("p")
        await until(pilot, lambda: said(app, "pause rank 0 failed: rank 0 is not running (killed)"),
                    what="the refusal")
        assert app.messages[-1][1] == "error"


async def test_r_asks_then_restarts(tui):
    async with tui(n=2, opts=["--grace", "2"]) as (app, pilot, run):
        pid = worker_of(app, 0)["pid"]
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        run.wait_event("restarted", lambda r: r["rank"] == 0)
        await until(pilot, lambda: said(app, "restarting rank 0"), what="the restart message")
        await until(pilot, lambda: worker_of(app, 0)["pid"] != pid and worker_of(app, 0)["state"] == "running",
                    what="a new rank 0 on screen")
        await until(pilot, lambda: said(app, "rank 0 restarted"), what="the restart notice")
        note = [c.key for c in app.table.cols].index("note")
        await until(pilot, lambda: "restarted 1x" in app.table.get_row("w0")[note].plain,
                    what="the restart count in the row's note")
        assert not alive(pid)


async def test_plus_and_minus_resize(tui):
    async with tui(n=2, opts=["--resize-mode", "independent", "--grace", "2"]) as (app, pilot, run):
        await pilot.press("plus")
        run.wait_event("resized", lambda r: r["to"] == 3)
        await until(pilot, lambda: "w2" in app.table.order, what="a row for rank 2")
        await until(pilot, lambda: said(app, "resizing from 2 to 3"), what="the resize message")
        await pilot.press("minus")
        run.wait_event("resized", lambda r: r["to"] == 2)
        await until(pilot, lambda: "w2" not in app.table.order, what="rank 2's row to go")


async def test_d_dumps_and_enter_shows_the_detail(tui):
    async with tui(n=2) as (app, pilot, run):
        await pilot.press("d")
        rec = run.wait_event("dump", lambda r: r["rank"] == 0)[0]
        await until(pilot, lambda: said(app, "dumping rank 0"), what="the dump message")
        await until(pilot, lambda: worker_of(app, 0)["last_dump"], what="the dump path in the snapshot")
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        screen = app.screen
        await until(pilot, lambda: screen.loads >= 2, what="the detail data")
        plot = screen.query_one(LossPlot)
        assert set(plot.series) == {0, 1} and plot.selected == 0 and plot.series[0]
        assert "tui worker rank 0 of 2 starting" in str(screen.query_one("#detail-stdout").render())
        assert "stderr hello" in str(screen.query_one("#detail-stderr").render())
        assert "tui_worker.py" in str(screen.query_one("#detail-dump").render()), rec
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)


async def test_l_shows_logs_and_tab_switches_stream(tui):
    async with tui(n=2) as (app, pilot, _run):
        await pilot.press("l")
        screen = app.screen
        assert isinstance(screen, LogsScreen)
        # both streams have lines: it opens on stdout (issue 31; a failed rank's opens on stderr)
        await until(pilot, lambda: screen.loads >= 1 and screen._shown, what="stdout lines")
        assert screen.stream == "stdout" and any("starting" in ln for ln in screen._shown)
        await pilot.press("tab")
        await until(pilot, lambda: screen.stream == "stderr" and screen._shown
                    and any("stderr hello" in ln for ln in screen._shown), what="stderr lines")
        await pilot.press("escape")
        assert not isinstance(app.screen, LogsScreen)


async def test_filter_sort_fold_help_and_children(tui):
    async with tui(n=2, env={"CHILD": "1"}) as (app, pilot, run):
        await until(pilot, lambda: any("." in k for k in app.table.order), timeout=30,
                    what="child rows (the sampler runs once a second)")
        child_keys = [k for k in app.table.order if k.startswith("w0.")]
        assert child_keys
        # f folds rank 0's children, f again shows them
        await pilot.press("f")
        await until(pilot, lambda: not any(k.startswith("w0.") for k in app.table.order), what="fold")
        await pilot.press("f")
        await until(pilot, lambda: any(k.startswith("w0.") for k in app.table.order), what="unfold")
        await pilot.press("F")
        await until(pilot, lambda: not any("." in k for k in app.table.order), what="fold all")
        # / filter to rank 1, Esc clears
        await pilot.press("slash")
        assert isinstance(app.screen, FilterDialog)
        await pilot.press("1", "enter")
        await until(pilot, lambda: app.table.order == ["w1"], what="only rank 1")
        assert said(app, "filter '1': 1 worker(s) shown")
        await pilot.press("escape")
        await until(pilot, lambda: app.table.order == ["w0", "w1"], what="the filter cleared")
        # s sorts by the next key; the rows follow it. Rank 1 paused: by state it comes first
        # (paused before running), by step last (rank 0 steps on past it).
        run.ctl("pause", "1")
        await until(pilot, lambda: (worker_of(app, 1) or {}).get("state") == "paused"
                    and (worker_of(app, 0)["step"] or 0) > (worker_of(app, 1)["step"] or 0), what="rank 1 paused, behind")
        assert app.table.order == ["w0", "w1"]  # by rank
        await pilot.press("s")
        assert app.sort == "state" and said(app, "sorted by state")
        await until(pilot, lambda: app.table.order == ["w1", "w0"], 10, what="rows by state: paused first")
        await pilot.press("s")
        assert app.sort == "step"
        await until(pilot, lambda: app.table.order == ["w0", "w1"], 10, what="rows by step: rank 0 first")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_q_detach_leaves_the_run_going(tui):
    async with tui(n=2) as (app, pilot, run):
        await pilot.press("q")
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("c")
        assert not isinstance(app.screen, QuitDialog) and said(app, "still watching")
        await pilot.press("q", "d")
        await until(pilot, lambda: app.return_value is not None, what="the app to exit")
        assert app.return_value == Outcome("detach", None)
    assert run.proc.poll() is None
    assert all(w["state"] == "running" for w in run.status()["workers"])


async def test_q_stop_ends_the_run_with_its_exit_code(tui):
    async with tui(n=2, opts=["--grace", "2"]) as (app, pilot, run):
        pids = run.all_pids()
        await pilot.press("q", "s")
        await until(pilot, lambda: app.return_value is not None, timeout=60, what="the app to exit")
        assert app.return_value.kind == "stopped"
        assert app.return_value.exit_code == run.wait_exit() == 1
        assert said(app, "stopping the run")
    assert_gone(pids)


async def test_finished_run_shows_how_each_worker_ended(tui):
    env = {"STEPS": "40", "FAIL_RANK": "1", "FAIL_AT": "20"}
    async with tui(n=2, env=env, wait_running=False) as (app, pilot, _run):
        await until(pilot, lambda: not app.live, timeout=60, what="the run to finish")
        banner = str(app.query_one("#banner").render())
        assert "run ended: exit code 1: rank 1: RuntimeError: boom at step 20" in banner
        assert "rank 0: exited (exit 0)" in banner
        assert "rank 1: failed (exit 1: RuntimeError: boom at step 20)" in banner
        assert said(app, "rank 1 failed")  # the alert, with the last stderr line
        # The keys that act leave the footer (nothing to act on); q leaves at once with the run's exit code.
        footer = {k for k, b in app.screen.active_bindings.items() if b.binding.show}
        assert not footer & {"p", "k", "d"} and {"question_mark", "q", "l"} <= footer, footer
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await until(pilot, lambda: screen.loads >= 1, what="detail from the run directory")
        assert screen.query_one(LossPlot).series.get(0)
        await pilot.press("escape", "q")
        await until(pilot, lambda: app.return_value is not None, what="the app to exit")
        assert app.return_value == Outcome("finished", 1)


def test_every_key_is_bound_and_every_action_is_in_the_palette():
    from mpwatch.tui import keys
    from mpwatch.tui.app import MpwatchApp

    bound = {k for b in MpwatchApp.BINDINGS for k in b.key.split(",")}
    for key in ("j", "g", "p", "P", "k", "r", "plus", "minus", "d", "l", "slash", "s", "q", "question_mark",
                "f", "F", "escape"):
        assert key in bound, key
    # the palette offers what the table binds (tests/tui/test_key_table.py drives it)
    assert {b.action for b in MpwatchApp.BINDINGS} == {k.action for k in keys.LIVE}
    for k in keys.LIVE:
        assert callable(getattr(MpwatchApp, f"action_{k.action}"))
