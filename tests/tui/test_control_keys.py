"""Issue 23 in the TUI, with Pilot against a real supervisor running tests/fixtures/control_loop.py:
`c` asks first, then checkpoints the selected rank or all of them (at one step); `t` lists the
tunables and changes one on every rank; a bad value says why; `?` lists both keys."""
from __future__ import annotations

import re

from mpwatch.tui.screens.checkpoint import CheckpointDialog
from mpwatch.tui.screens.help import HelpScreen
from mpwatch.tui.screens.tunables import SetTunableDialog, TunablesScreen
from tests.helpers import FIXTURES
from tests.tui.conftest import drawn, said, until, worker_of

LOOP = FIXTURES / "control_loop.py"


async def _live(tui, n=2):
    return tui(n=n, script=LOOP, args=("0", "0.05"))


async def test_c_asks_then_checkpoints_this_rank_or_every_rank_at_one_step(tui):
    async with await _live(tui) as (app, pilot, run):
        await until(pilot, lambda: all(w.get("polls_checkpoint") for w in app.status["workers"]),
                    what="both ranks polling")
        await pilot.press("j", "c")
        await until(pilot, lambda: isinstance(app.screen, CheckpointDialog), what="the question")
        await pilot.press("n")
        await until(pilot, lambda: said(app, "checkpoint cancelled"), what="the cancel")
        await pilot.press("c", "r")
        await until(pilot, lambda: said(app, "checkpoint asked of rank 1 "), what="the reply")
        taken = run.wait_event("checkpoint_taken", timeout=60)[0]
        assert taken["rank"] == 1 and taken["at"] is None
        req = run.events("checkpoint_requested")[0]
        assert req["ranks"] == [1] and req["by"].startswith("tui ")
        await pilot.press("c", "a")
        await until(pilot, lambda: said(app, "checkpoint asked of ranks 0-1 at step "), what="the reply for all")
        s = int(re.search(r"at step (\d+)", next(t for t, _ in app.messages if "ranks 0-1 at step" in t)).group(1))
        both = run.wait_event("checkpoint_taken", lambda e: e["id"] == 2, timeout=60, count=2)
        assert {e["step"] for e in both} == {s}
        await until(pilot, lambda: said(app, f"checkpoint taken by ranks 0-1 at step {s}"), what="the news")


async def test_t_lists_the_tunables_and_changes_one_on_every_rank(tui):
    async with await _live(tui) as (app, pilot, run):
        await until(pilot, lambda: len(app.status.get("tunables") or []) == 4, what="four tunables")
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TunablesScreen), what="the tunables screen")
        screen = app.screen
        await until(pilot, lambda: screen.table.row_count == 4, what="four rows")
        names = [screen.table.get_row_at(i)[0].plain for i in range(4)]
        assert names == ["batch", "lr", "on", "tag"]
        row = [c.plain for c in screen.table.get_row("lr")]
        assert row[:4] == ["lr", "float", "0.1", "0.1"] and row[4] == "never changed"
        await pilot.press("down", "enter")  # lr
        await until(pilot, lambda: isinstance(app.screen, SetTunableDialog), what="the value dialog")
        await pilot.press(*["backspace"] * 5, *"fast", "enter")  # not a float
        await until(pilot, lambda: said(app, "set lr failed: lr is a float: expected a float, got 'fast'"),
                    what="the refusal")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SetTunableDialog), what="the value dialog again")
        await pilot.press(*["backspace"] * 5, *"0.02", "enter")
        await until(pilot, lambda: said(app, "lr = 0.02 from step ") and said(app, " on ranks 0-1 (now 0.1)"), what="the reply")
        applied = run.wait_event("tunable_applied", timeout=60, count=2)
        step = applied[0]["step"]
        assert {e["step"] for e in applied} == {step} and run.events("tunable_set")[0]["by"].startswith("tui ")
        await until(pilot, lambda: "2/2 ranks" in [c.plain for c in screen.table.get_row("lr")][4], what="2/2")
        row = [c.plain for c in screen.table.get_row("lr")]
        assert row[2] == "0.02" and "by tui " in row[4] and row[4].startswith(f"from step {step} · 2/2 ranks")
        await until(pilot, lambda: said(app, f"lr = 0.02 on ranks 0-1 from step {step}"), what="the news")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, TunablesScreen), what="back")
        assert worker_of(app, 0)["state"] == "running"


async def test_help_lists_c_and_t(tui):
    async with await _live(tui, n=1) as (app, pilot, run):
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        text = drawn(app.screen.query_one("Static"))
        assert "checkpoint now" in text and "tunables:" in text
