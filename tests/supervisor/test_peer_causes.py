"""A cause comes from the process's own output (issue 20, item 3): after a resize, killing one
rank of a real 4-rank gloo run (demo/hang.py, torch; the 3-rank run tests/supervisor/three_ranks.py
shares with test_paused_culprit.py, resized) makes its peers' collectives fail, and
each says so ("its collectives failed after rank 2 was killed"), never quoting mpwatch's own
marker lines; the status says the ranks share a process group."""
import re

import pytest

from tests.helpers import need
from tests.supervisor.three_ranks import act

need("torch", "demo/hang.py needs torch (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(600)]  # the shared run's two acts, when it starts here


def test_after_a_resize_killing_a_rank_names_it_in_its_peers_causes(three_ranks):
    act(three_ranks, three_ranks.peers)
    a = three_ranks.peers
    assert "rank 0 resized at" in a.stderr_of_0  # mpwatch's marker is in the log...
    # the ranks the resize stopped say so (mpwatch ended them: no cause of their own)
    assert sorted(e["rank"] for e in a.resized) == [0, 1, 2], a.resized
    for e in a.resized:
        assert e["state"] == "killed" and e["cause"].startswith("stopped for a resize ("), e
    ends = a.ends
    assert sorted(ends) == [0, 1, 2, 3], ends
    assert ends[2]["state"] == "killed" and ends[2]["cause"] == "killed on request (SIGTERM)"
    for r in (0, 1, 3):
        assert ends[r]["state"] == "failed", ends[r]
        # the RuntimeError ends the script (exit 1), unless gloo's own thread met the closed socket
        # first and aborted the process: both are this rank's end, and the cause names the kill
        assert re.match(r"(exit 1|signal SIGABRT): its collectives failed after rank 2 was killed \(",
                        ends[r]["cause"]), ends[r]
        assert "--- mpwatch" not in ends[r]["cause"]  # ...and never a cause
        assert not any("--- mpwatch" in line for line in ends[r]["stderr_tail"])
