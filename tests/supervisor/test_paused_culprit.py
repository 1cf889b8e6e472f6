"""A paused rank is named, not blamed (issue 20, item 2): pause rank 1 of a 3-rank gloo run
(demo/hang.py, real torch; the run tests/supervisor/three_ranks.py shares with
test_peer_causes.py), its peers stall in their all_reduce, and the finding says why:
"ranks 0,2 wait in all_reduce at step N for rank 1, which was paused at HH:MM:SS (p resumes)",
one finding updated in place as it learns more; resumed, every rank reports again and the
finding leaves the status."""
import time

import pytest

from tests.helpers import need
from tests.supervisor.three_ranks import act, finding

need("torch", "demo/hang.py needs torch (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(600)]  # the shared run's two acts, when it starts here


def test_a_paused_rank_is_the_named_cause_in_one_finding(three_ranks):
    act(three_ranks, three_ranks.paused)
    a = three_ranks.paused
    alert, events = a.alert, a.events
    paused = next(e for e in events if e["event"] == "paused")
    m = finding().match(alert["message"])
    assert m, alert["message"]
    assert m.group(3) == time.strftime("%H:%M:%S", time.localtime(paused["ts"]))
    assert a.before - 1 <= paused["ts"] <= alert["ts"]
    assert alert["culprits"] == [1] and alert["waiting"] == [0, 2] and alert["key"] == "hang:1"
    # one finding, in place; the status's own analysis said the same once the finding had caught up
    st = a.status
    hangs_shown = [x["message"] for x in st["alerts"] if x["kind"] == "hang"]
    assert hangs_shown == [st["straggler"]["text"]], st["alerts"]
    assert finding().match(st["straggler"]["text"])
    alerts = [e for e in events if e["event"] == "alert"]
    hangs = [e for e in alerts if e.get("kind") == "hang"]
    # every hang alert of the run was this finding: the first one, its updates and its end share its key
    assert {e["key"] for e in hangs} == {"hang:1"}
    standing = [e for e in hangs if not e.get("ended")]
    assert all(e.get("update") for e in standing[1:]), standing
    w1 = next(w for w in st["workers"] if w["rank"] == 1)
    assert w1["state"] == "paused" and w1["paused_at"] == pytest.approx(paused["ts"], abs=0.5)
    assert "likely culprit" not in a.stderr and "(p resumes)" in a.stderr

    # resumed: the finding left the status, and its end is its last alert
    assert alerts[-1].get("ended") and a.resumed_status["straggler"]["text"] is None
    # resumed, rank 1 is behind its peers for a moment: it is not blamed for that, the finding just ends
    resumed = next(e for e in events if e["event"] == "resumed")["ts"]
    after = [e for e in alerts if e["ts"] >= resumed]
    assert [bool(e.get("ended")) for e in after] == [True], after
