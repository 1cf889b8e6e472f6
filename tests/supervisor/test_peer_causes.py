"""A cause comes from the process's own output (issue 20, item 3): after a resize, killing one
rank of a real 4-rank gloo run (demo/hang.py, torch) makes its peers' collectives fail, and
each says so ("its collectives failed after rank 2 was killed"), never quoting mpwatch's own
marker lines; the status says the ranks share a process group."""
import pytest

from tests.helpers import ROOT, wait_for

pytest.importorskip("torch", reason="demo/hang.py needs torch (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]


def test_after_a_resize_killing_a_rank_names_it_in_its_peers_causes(headless):
    run = headless(ROOT / "demo" / "hang.py", "--steps", "100000", "--step-time", "0.02", n=3)
    wait_for(lambda: all((w["step"] or 0) >= 5 for w in run.status()["workers"]), 180, what="three ranks stepping")
    run.ctl("resize", "4")
    wait_for(lambda: (lambda st: len(st["workers"]) == 4 and all(
        w["state"] == "running" and w["restarts"] == 0 and (w["step"] or 0) >= 3 and w.get("dist")
        for w in st["workers"]))(run.status()), 180, what="four ranks stepping in one process group")
    assert "rank 0 resized at" in run.log(0, "stderr")  # mpwatch's marker is in the log...
    run.ctl("kill", "2")
    ends = {e["rank"]: e for e in run.wait_event("worker_exited", timeout=120, count=7)[3:]}  # after the resize's 3
    assert ends[2]["state"] == "killed" and ends[2]["cause"] == "killed on request (SIGTERM)"
    for r in (0, 1, 3):
        assert ends[r]["state"] == "failed", ends[r]
        assert ends[r]["cause"].startswith("exit 1: its collectives failed after rank 2 was killed ("), ends[r]
        assert "--- mpwatch" not in ends[r]["cause"]  # ...and never a cause
        assert not any("--- mpwatch" in line for line in ends[r]["stderr_tail"])
    run.wait_exit(60)
