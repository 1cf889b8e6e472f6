"""Issue 23 after the fact: a run whose tunables were changed and that was asked to checkpoint,
recorded by a real supervisor; the replay shows the tunables as they were at each moment (the
`t` screen too), `summary` lists the changes and the checkpoints with each rank's answer, and a
replay refuses `c` and a change."""
from __future__ import annotations

import json

import pytest

from mpwatch.cli.summary import summary_lines
from mpwatch.rundir import postmortem, reader
from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.render import glyphs
from mpwatch.tui.replay_app import ReplayApp
from mpwatch.tui.screens.help import HelpScreen
from mpwatch.tui.screens.tunables import TunablesScreen
from tests.helpers import FIXTURES, mpwatch
from tests.replay.conftest import seek
from tests.tui.conftest import drawn, said, until


@pytest.fixture(scope="session")
def tuned(record):
    """control_loop.py on 2 ranks: lr set to 0.5, then a checkpoint of all, then the run stopped."""
    def drive(run):
        run.wait_event("tunable_declared", count=4)  # the run's first declarations: by either rank
        run.wait_declared("lr")
        run.ctl("set", "lr", "0.5")
        run.wait_event("tunable_applied", count=2, timeout=60)
        run.ctl("checkpoint", "all")
        run.wait_event("checkpoint_taken", count=2, timeout=60)
        run.ctl("stop")
        run.wait_exit(60)
    return record("tuned", FIXTURES / "control_loop.py", "0", "0.05", n=2, until=drive)


def test_the_replay_shows_each_moments_tunables_and_checkpoints(tuned):
    src = ReplaySource(tuned.dir)
    seek(src, lambda e: e["event"] == "tunable_declared", "declared")
    lr = next(t for t in src.status()["tunables"] if t["name"] == "lr")
    assert (lr["value"], lr["changes"]) == (0.1, [])
    seek(src, lambda e: e["event"] == "tunable_set", "set")
    lr = next(t for t in src.status()["tunables"] if t["name"] == "lr")
    # asked, not taken yet: pending, the value in force still the old one (issue 31)
    assert lr["value"] == 0.1 and lr["changes"][0]["pending"] and lr["changes"][0]["value"] == 0.5
    assert lr["changes"][0]["waiting"] == [0, 1] and lr["changes"][0]["answers"] == []
    src.move("end")
    st = src.status()
    lr = next(t for t in st["tunables"] if t["name"] == "lr")
    change = lr["changes"][0]
    assert lr["value"] == 0.5 and not change["pending"]
    steps = {a["step"] for a in change["answers"]}
    assert len(steps) == 1 and change["step"] in steps and change["waiting"] == [] and change["by"].startswith("ctl")
    req = st["checkpoints"][0]
    assert req["ranks"] == [0, 1] and {a["step"] for a in req["answers"]} == {req["step"]} and not req["waiting"]
    final = json.loads((tuned.dir / "final.json").read_text())  # what the live status said at the end
    assert st["tunables"] == final["tunables"] and st["checkpoints"] == final["checkpoints"]


def test_summary_lists_the_changes_and_the_checkpoints(tuned):
    s = postmortem.summarize(reader.read(tuned.dir))
    lr = next(t for t in s["tunables"] if t["name"] == "lr")
    step = lr["changes"][0]["step"]
    req = s["checkpoints"][0]
    text = "\n".join(summary_lines(s))
    assert "tunables changed:" in text and f"lr = 0.5 (was 0.1) from step {step}, by ctl " in text
    assert "2 rank(s) took it" in text
    assert "checkpoints asked:" in text and f"ranks 0-1 at step {req['step']}, by ctl " in text
    assert f"taken at step {req['step']}" in text
    res = mpwatch("summary", tuned.dir, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["checkpoints"][0]["step"] == req["step"]


async def test_a_replay_shows_t_and_refuses_c_and_a_change(tuned):
    app = ReplayApp(ReplaySource(tuned.dir), glyphs=glyphs.UNICODE, notices=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the first status")
        await pilot.press("c")
        await until(pilot, lambda: said(app, "cannot checkpoint: this is a replay"), what="the refusal")
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TunablesScreen), what="the tunables screen")
        screen = app.screen
        await until(pilot, lambda: screen.table.row_count == 4, what="the rows")
        assert [c.plain for c in screen.table.get_row("lr")][2] == "0.5"
        await pilot.press("down", "enter")
        await until(pilot, lambda: said(app, "cannot change lr: this is a replay"), what="the refusal to change")
        assert isinstance(app.screen, TunablesScreen)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_replays_t_says_it_is_read_only(tuned, size):
    """Issue 31: the replay's help offered t as "...; Enter sets one", and its screen said
    "Enter: change the selected one": in a replay t shows the tunables as of the cursor's
    moment, and nothing is set. Its help line and its screen say that, and Enter's "Change"
    leaves its footer."""
    app = ReplayApp(ReplaySource(tuned.dir), glyphs=glyphs.UNICODE, notices=False)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the first status")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        await pilot.pause()
        text = drawn(app.screen.query_one("Static"))
        assert "tunables as of the moment shown: mpwatch.tunable() values and changes (read-only)" in text
        assert "Enter sets one" not in text
        await pilot.press("escape", "t")
        await until(pilot, lambda: isinstance(app.screen, TunablesScreen), what="the tunables screen")
        await pilot.pause()
        screen = app.screen
        assert "as of the moment shown; read-only here" in drawn(screen.title_bar)
        assert "Enter: change" not in drawn(screen.title_bar)
        assert not [b for b in screen.active_bindings.values() if b.binding.action == "edit" and b.enabled]


def test_summary_says_a_change_that_never_came_into_force_was_pending(headless):
    """Issue 31, item 2: a value set for a step the run never reached is no value it had: the
    summary says it stayed pending (it said "lr = 0.5 (was 0.1) from step 999999")."""
    run = headless(FIXTURES / "control_loop.py", "80", "0.02", n=1)
    run.wait_event("tunable_declared", count=4)
    run.ctl("set", "lr", "0.5", "--at-step", "999999")
    assert run.wait_exit(120) == 0
    text = "\n".join(summary_lines(postmortem.summarize(reader.read(run.run_dir))))
    assert "lr = 0.5 from step 999999 (0.1 until then), by ctl " in text, text
    assert ": pending, 0 of 1 rank(s) took it" in text and "(was 0.1)" not in text
