"""Steps/s that say what a worker does now (issue 20, item 2): a resumed worker's rate is not
dragged down by the time it was paused, and a paused one shows 0; nor are the rates of the
ranks that waited for it in their collectives (issue 31). Real runs."""
import os

import pytest

from tests.helpers import FIXTURES, wait_for
from tests.supervisor.three_ranks import AFTER_RESUME, act


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


@pytest.mark.timeout(600)  # the shared run's two acts, when it starts here
def test_ranks_blocked_behind_a_paused_peer_read_no_rate_within_seconds(three_ranks):
    """Issue 40: rank 1 of the shared 3-rank gloo run paused, ranks 0 and 2 make no step from then
    on (they wait in their collective); they read 53 steps/s 12 s later, decaying until the stall
    timeout. Now within 5 s of the pause both read none, in the status (the screen's and ctl
    status's) and in the metrics alike."""
    act(three_ranks, three_ranks.paused)
    q = three_ranks.paused.quiet
    assert "error" not in q, q["error"]
    assert q["after_s"] <= 5.0, q["seen"]


@pytest.mark.timeout(600)  # the shared run's two acts, when it starts here
def test_lock_step_peers_of_a_resumed_rank_show_their_rate_not_its_pause(three_ranks):
    """Issue 31: rank 1 of the shared 3-rank gloo run (tests/supervisor/three_ranks.py: demo/hang.py,
    real torch) paused until its peers' hang finding stood, over 6 s; its peers waited for it in their
    all_reduce. Resumed, all three step together again, and all three say so: the peers' windows no
    longer span the pause (they read 1.2 beside its 9.8 steps/s for the length of their window)."""
    act(three_ranks, three_ranks.paused)
    a = three_ranks.paused
    paused, resumed = (next(e["ts"] for e in a.events if e["event"] == kind) for kind in ("paused", "resumed"))
    assert resumed - paused > 6
    if isinstance(a.after_resume, BaseException):
        raise a.after_resume
    ws = a.after_resume  # each rank AFTER_RESUME steps on, its rate known: well within its window
    assert all(w["step"] >= a.step_at_resume + AFTER_RESUME for w in ws)
    rates = [w["steps_per_s"] for w in ws]
    assert min(rates) > 0.6 * max(rates), rates  # lock-step: one rate (it read [~3, ~6, ~3] before)
