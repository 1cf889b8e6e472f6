"""How a run ended, one story (issue 40): a run stopped with `ctl stop` read "run finished, exit
code 1" in the TUI and "ended: stopped" in summary. On a real run watched by the TUI and stopped
with ctl: the banner, the headless line, summary and the events all tell it in text.run_end's
words."""
from __future__ import annotations

from pathlib import Path

from mpwatch.sources.local import Client
from mpwatch.tui import app as app_module
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from tests.helpers import mpwatch, wait_for
from tests.tui.conftest import WORKER, until

ENDED = "stopped (asked with ctl stop or the TUI), exit code 1"


class App(MpwatchApp):
    CSS_PATH = Path(app_module.__file__).parent / "app.tcss"


async def test_a_run_stopped_with_ctl_stop_ends_in_the_same_words_everywhere(headless):
    run = headless(WORKER, n=2)
    wait_for(lambda: all(w["step"] for w in run.status()["workers"]), 60, what="two ranks stepping")
    client = Client.at(run.run_dir)
    app = App(client, run.run_dir, glyphs=glyphs.UNICODE, notices=False)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.snapshots > 0, what="the first snapshot")
            run.ctl("stop")
            await until(pilot, lambda: not app.live, 60, what="the run to end")
            banner = str(app.query_one("#banner").render()).splitlines()[0]
    finally:
        client.close()
    assert run.wait_exit(60) == 1
    assert banner == f"run ended: {ENDED}; press q to leave", banner
    assert f"run ended: {ENDED}" in run.stderr_text  # the headless line
    summary = mpwatch("summary", run.run_dir).stdout.splitlines()
    assert summary[1] == f"ended: {ENDED}", summary
    (fin,) = run.events("run_finished")
    assert fin["stopped"] == "asked with ctl stop or the TUI"
