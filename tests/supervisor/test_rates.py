"""Steps/s that say what a worker does now (issue 20, item 2): a resumed worker's rate is not
dragged down by the time it was paused, and a paused one shows 0. A real run."""
import os

from tests.helpers import FIXTURES, wait_for


def test_a_resumed_worker_shows_its_rate_not_its_pause(headless):
    run = headless(FIXTURES / "tui_worker.py", n=1, env=dict(os.environ, SLEEP="0.05"))
    wait_for(lambda: (run.worker(0)["steps_per_s"] or 0) > 12, 60, what="about 20 steps/s")
    run.ctl("pause", "0")
    w = run.wait_state(0, "paused")
    assert w["steps_per_s"] == 0.0
    step = w["step"]
    wait_for(lambda: run.worker(0)["uptime"] > w["uptime"] + 6, 60, what="six seconds paused")
    run.ctl("resume", "0")
    # as soon as it has stepped again, its rate is its own (paused 6 s of an 8 s window: it read ~5)
    got = wait_for(lambda: (lambda x: x if x["steps_per_s"] is not None and (x["step"] or 0) > step + 5 else None)(
        run.worker(0)), 60, what="steps after the resume")
    assert got["steps_per_s"] > 12, got["steps_per_s"]
    run.ctl("stop")
