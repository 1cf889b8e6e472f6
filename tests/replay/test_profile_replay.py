"""Issue 32 after the fact: a run profiled with `ctl profile all` (an unmodified torch loop,
recorded by a real supervisor); the replay shows each moment's profiles (asked, running, then
each rank's trace and operators) as the live status had them at the end, `summary` lists them
with their files, and a replay refuses `o`."""
from __future__ import annotations

import json

import pytest

from mpwatch.cli.summary import summary_lines
from mpwatch.contract import rank_state
from mpwatch.rundir import postmortem, reader
from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.render import glyphs
from mpwatch.tui.replay_app import ReplayApp
from tests.helpers import FIXTURES, wait_for
from tests.replay.conftest import rebuilt_end, seek
from tests.tui.conftest import said, until


@pytest.fixture(scope="session")
def profiled(record):
    """auto_loop.py on 2 ranks: profiled, both traces written, then the run stopped."""
    def drive(run):
        wait_for(lambda: len(run.status()["workers"]) == 2 and all(
            (w["step"] or 0) >= 3 for w in run.status()["workers"]), timeout=120, what="both ranks stepping")
        run.ctl("profile", "all", "--steps", "2")
        run.wait_event("profile_written", count=2, timeout=60)
        run.ctl("stop")
        run.wait_exit(60)
    return record("profiled", FIXTURES / "auto_loop.py", "--steps", "250", "--sleep", "0.05", "--out",
                  "/dev/null", n=2, until=drive)


def test_the_replay_shows_each_moments_profiles_as_the_live_status_had_them(profiled):
    src = ReplaySource(profiled.dir)
    seek(src, lambda e: e["event"] == "profile_requested", "asked")
    req = src.status()["profiles"][0]
    assert [rank_state(req, r, req["results"]) for r in (0, 1)] == ["asked", "asked"] and req["steps"] == 2
    seek(src, lambda e: e["event"] == "profile_started", "started")
    req = src.status()["profiles"][0]
    assert "running" in [rank_state(req, r, req["results"]) for r in (0, 1)]
    st = rebuilt_end(src)
    final = json.loads((profiled.dir / "final.json").read_text())  # what the live status said at the end
    assert st["profiles"] == final["profiles"]
    assert [r["state"] for r in st["profiles"][0]["results"]] == ["written", "written"]


def test_summary_lists_the_profiles_and_their_files(profiled):
    s = postmortem.summarize(reader.read(profiled.dir))
    req = s["profiles"][0]
    path = req["results"][0]["path"]
    text = "\n".join(summary_lines(s))
    first = req["step"] + 1
    assert "profiles:\n  +0m" in text
    assert f"profile #1 of ranks 0-1, steps {first}-{first + 1}, asked by ctl" in text
    assert f"written on ranks 0-1 ({path.replace('rank-0/', 'rank-N/')})" in text
    assert "2 profile(s) in rank-N/profiles/" in text


async def test_a_replay_refuses_o(profiled):
    app = ReplayApp(ReplaySource(profiled.dir), glyphs=glyphs.UNICODE, notices=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the first status")
        await pilot.press("o")
        await until(pilot, lambda: said(app, "cannot profile: this is a replay"), what="the refusal")
