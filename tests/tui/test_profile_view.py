"""Issue 32 in the TUI: `o` asks first, then profiles the selected rank or all of them (a real
supervisor and an unmodified torch loop, tests/fixtures/auto_loop.py); the detail view then
shows where the profile stands, where its trace is and its top operators by self time. The
screens are drawn from a recorded run (tests/record.py's `profile`: both ranks' traces written,
then rank 1 profiled again) at 80x24 and 160x48, and their words checked against the recording."""
from __future__ import annotations

import pytest

from mpwatch.text import fmt
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.profile import ProfileDialog
from tests.helpers import FIXTURES
from tests.tui.conftest import drawn, said, until
from tests.tui.recorded import recording
from tests.tui.test_snapshots import first_snapshot, recorded_app, size_id

LOOP = FIXTURES / "auto_loop.py"


async def _detail(pilot, keys: list[str]):
    await first_snapshot(pilot)
    await pilot.press(*keys, "enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, DetailScreen) and pilot.app.screen.loads > 0,
                what="the detail data")


async def rank_0_detail(pilot):
    await _detail(pilot, [])


async def rank_1_detail(pilot):
    await _detail(pilot, ["down"])


@size_id
def test_detail_view_of_a_profiled_rank(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("profile", tmp_path), terminal_size=size, run_before=rank_0_detail)


@size_id
def test_detail_view_of_a_rank_being_profiled(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("profile", tmp_path), terminal_size=size, run_before=rank_1_detail)


def test_the_profile_dialog(snap_compare, tmp_path):
    async def dialog(pilot):
        await first_snapshot(pilot)
        await pilot.press("o")
        await until(pilot, lambda: isinstance(pilot.app.screen, ProfileDialog), what="the question")
    assert snap_compare(recorded_app("profile", tmp_path), terminal_size=(80, 24), run_before=dialog)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_detail_view_says_the_recorded_trace_and_its_operators(tmp_path, size):
    st = recording("profile")["status"]
    req = st["profiles"][0]
    r0 = next(r for r in req["results"] if r["rank"] == 0)
    app = recorded_app("profile", tmp_path)
    async with app.run_test(size=size) as pilot:
        await rank_0_detail(pilot)
        text = drawn(app.screen.query_one("#detail-profile"))
        first = req["answers"][0]["step"] + 1
        assert f"profile #{req['id']} of ranks 0-1, steps {first}-{first + 2}, asked by ctl" in text
        assert f"trace {r0['path']}, {fmt.size_long(r0['bytes'])}, steps {first}-{first + 2}" in text
        top = r0["top"][0]
        row = f"{fmt.span(top['self_cpu_us'] / 1e6)} {top['calls']} {top['name'][:20]}"
        assert f"SELF CPU CALLS OPERATOR {row}" in text
        await pilot.press("escape", "down", "enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.rank == 1
                    and app.screen.loads > 0, what="rank 1's detail")
        pane = app.screen.query_one("#detail-profile")
        await until(pilot, lambda: "running:" in drawn(pane), what="running")
        w1 = next(w for w in st["workers"] if w["rank"] == 1)
        start = st["profiles"][-1]["answers"][0]["step"]
        assert f"running: {w1['step'] - start} of 50 steps" in drawn(pane)


async def test_o_asks_then_profiles_the_rank_and_its_detail_shows_the_operators(tui):
    async with tui(n=2, script=LOOP, args=("--steps", "250", "--sleep", "0.05", "--out", "/dev/null"),
                   size=(120, 40)) as (app, pilot, run):
        await pilot.press("j", "o")
        await until(pilot, lambda: isinstance(app.screen, ProfileDialog), what="the question")
        await pilot.press("n")
        await until(pilot, lambda: said(app, "profile cancelled"), what="the cancel")
        await pilot.press("o", "r")
        await until(pilot, lambda: said(app, "profile of its next 5 steps asked of rank 1"), what="the reply")
        written = run.wait_event("profile_written", timeout=60)[0]
        assert written["rank"] == 1 and run.events("profile_requested")[0]["by"].startswith("tui ")
        await until(pilot, lambda: any(r["state"] == "written" for p in app.status.get("profiles") or []
                                       for r in p["results"]), what="the written trace in the status")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen) and app.screen.loads > 0,
                    what="the detail view")
        text = drawn(app.screen.query_one("#detail-profile"))
        assert f"trace {written['path']}" in text and "aten::" in text, text
