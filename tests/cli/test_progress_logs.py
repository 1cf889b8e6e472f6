"""A progress bar redrawn with \\r (tqdm; issue 20, item 9) is shown as a terminal shows it, its
latest state once a line, so the real messages stay in view: `ctl logs`, live and --follow,
and the TUI's logs view; the log file keeps every byte."""
import subprocess

from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.logs import LogsScreen
from tests.helpers import FIXTURES, MPWATCH, mpwatch, wait_for
from tests.tui.conftest import until

WANT = ["loading data: 60000 samples", "Epoch 1: 100%|##########| 300/300", "epoch 1 done: val loss 0.8",
        "Epoch 2: 100%|##########| 300/300", "epoch 2 done: val loss 0.7"]


def test_ctl_logs_shows_a_progress_bar_once_a_line(headless):
    run = headless(FIXTURES / "progress.py", n=1)
    wait_for(lambda: "epoch 2 done" in run.log(0, "stderr"), 60, what="both epochs")
    assert (run.run_dir / "rank-0" / "stderr.log").read_bytes().count(b"\r") == 602  # every redraw is in the file
    res = mpwatch("ctl", "--run", run.run_dir, "logs", "0", "--stderr", "--lines", "10")
    assert res.returncode == 0 and res.stdout.splitlines() == WANT, res.stdout
    follow = subprocess.Popen([*MPWATCH, "ctl", "--run", str(run.run_dir), "logs", "0", "--stderr", "--lines", "10",
                               "--follow"], stdout=subprocess.PIPE, text=True)
    try:
        assert [follow.stdout.readline().rstrip("\n") for _ in WANT] == WANT
    finally:
        follow.kill()
        follow.wait()
    run.ctl("stop")


async def test_the_logs_view_shows_a_progress_bar_once_a_line(headless):
    from mpwatch.sources.local import Client

    run = headless(FIXTURES / "progress.py", n=1)
    wait_for(lambda: "epoch 2 done" in run.log(0, "stderr"), 60, what="both epochs")
    client = Client.at(run.run_dir)
    app = MpwatchApp(client, run.run_dir, glyphs=glyphs.UNICODE, notices=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshots > 0, what="the first snapshot")
            await pilot.press("l")
            await until(pilot, lambda: isinstance(app.screen, LogsScreen) and app.screen.loads > 0, what="the logs")
            shown = [str(line.text).rstrip() for line in app.screen.query_one("#logs-body").lines]
            assert [ln for ln in shown if ln] == WANT, shown
    finally:
        client.close()  # (the run is stopped by the fixture's cleanup)
