"""An event says what it is (issue 31): the end of a hang finding read "run alert" in the
events screen (and the replay's strip). A real 3-rank gloo run (demo/hang.py, torch): rank 1
paused, its peers stall, the finding names it; resumed, the finding ends, and its event reads
"hang alert no longer holds: ranks 0,2 wait ... for rank 1 ...", at 80x24 and 160x48."""
from __future__ import annotations

import pytest

from mpwatch.sources.local import Client
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.events import EventsScreen
from tests.helpers import ROOT, wait_for
from tests.tui.conftest import until

pytest.importorskip("torch", reason="demo/hang.py needs torch (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]


async def events_lines(run, size: tuple[int, int]) -> list[str]:
    """The events screen of a TUI attached to the run, line by line."""
    with Client.at(run.run_dir) as client:
        app = MpwatchApp(client, run.run_dir, glyphs=glyphs.UNICODE, notices=False)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.snapshots > 0, what="the first snapshot")
            await pilot.press("e")
            await until(pilot, lambda: isinstance(app.screen, EventsScreen), what="the events screen")
            ls = app.screen.list
            lines = [str(ls.get_option_at_index(i).prompt) for i in range(ls.option_count)]
            app.poller.stop()
    return lines


async def test_the_end_of_a_hang_finding_says_which_alert_ended(headless):
    run = headless(ROOT / "demo" / "hang.py", "--steps", "100000", "--step-time", "0.02", n=3,
                   opts=["--stall-timeout", "3"])
    wait_for(lambda: all((w["step"] or 0) >= 10 for w in run.status()["workers"]), 180,
             what="three ranks stepping")
    run.ctl("pause", "1")
    run.wait_event("alert", lambda e: e.get("kind") == "hang", 120)
    run.ctl("resume", "1")
    ended = run.wait_event("alert", lambda e: e.get("kind") == "hang" and e.get("ended"), 120)[0]
    for size in ((80, 24), (160, 48)):
        lines = await events_lines(run, size)
        assert not [ln for ln in lines if ln.rstrip().endswith(" alert")], lines
        said = [ln for ln in lines if "hang alert no longer holds: " in ln]
        assert len(said) == 1 and said[0].endswith(ended["message"]) and "for rank 1" in said[0], lines
    run.ctl("stop")
    run.wait_exit(60)
