"""Steps/s that say what a worker does now (issue 20, item 2): a resumed worker's rate is not
dragged down by the time it was paused, and a paused one shows 0; nor are the rates of the
ranks that waited for it in their collectives (issue 31). Real runs."""
import os

import pytest

from tests.helpers import FIXTURES, ROOT, wait_for


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


def test_lock_step_peers_of_a_resumed_rank_show_their_rate_not_its_pause(headless):
    """Issue 31: rank 1 of a 3-rank gloo run (demo/hang.py, real torch) paused 6 s; its peers
    waited for it in their all_reduce. Resumed, all three step together again, and all three
    say so: the peers' windows no longer span the pause (they read 1.2 beside its 9.8 steps/s
    for the length of their window)."""
    pytest.importorskip("torch", reason="a process group needs torch (the demo extra)")
    run = headless(ROOT / "demo" / "hang.py", "--steps", "100000", "--step-time", "0.05", n=3,
                   opts=["--stall-timeout", "60"])
    wait_for(lambda: all((w["steps_per_s"] or 0) > 3 and w["dist"] for w in run.status()["workers"]), 180,
             what="three ranks stepping together")
    run.ctl("pause", "1")
    paused = run.wait_state(1, "paused")
    wait_for(lambda: run.worker(1)["uptime"] > paused["uptime"] + 6, 60, what="six seconds paused")
    run.ctl("resume", "1")
    step = max(w["step"] for w in run.status()["workers"])

    def stepped() -> list[dict] | None:  # each rank 8 steps on, its rate known: well within its window
        ws = run.status()["workers"]
        return ws if all((w["step"] or 0) >= step + 8 and w["steps_per_s"] for w in ws) else None
    ws = wait_for(stepped, 60, interval=0.02, what="eight steps after the resume")
    rates = [w["steps_per_s"] for w in ws]
    assert min(rates) > 0.6 * max(rates), rates  # lock-step: one rate (it read [~3, ~6, ~3] before)
    run.ctl("stop")
