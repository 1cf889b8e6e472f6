"""A paused rank is named, not blamed (issue 20, item 2): pause rank 1 of a 3-rank gloo run
(demo/hang.py, real torch), its peers stall in their all_reduce, and the finding says why:
"ranks 0,2 wait in all_reduce at step N for rank 1, which was paused at HH:MM:SS (p resumes)",
one finding updated in place as it learns more; resumed, every rank reports again and the
finding leaves the status."""
import re
import time

import pytest

from mpwatch.probes import pyspy
from tests.helpers import ROOT, wait_for

pytest.importorskip("torch", reason="demo/hang.py needs torch (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]

# Where the peers wait depends on where the pause caught rank 1: in the loss's all_reduce, or in
# backward(), whose DDP gradient all-reduce only the native stack (py-spy, when installed) shows.
NEED_IN = r" in " if pyspy.find() else r"(?: in )?"
FINDING = re.compile(rf"^ranks 0,2 wait{NEED_IN}(all_reduce|DDP's gradient all-reduce \(backward\)|) at step (\d+) "
                     r"for rank 1, which was paused at (\d\d:\d\d:\d\d) \(p resumes\)$")


def test_a_paused_rank_is_the_named_cause_in_one_finding(headless):
    run = headless(ROOT / "demo" / "hang.py", "--steps", "100000", "--step-time", "0.02", n=3,
                   opts=["--stall-timeout", "6"])
    wait_for(lambda: all((w["step"] or 0) >= 10 for w in run.status()["workers"]), 180, what="three ranks stepping")
    before = time.time()
    run.ctl("pause", "1")
    alert = run.wait_event("alert", lambda r: r.get("kind") == "hang" and FINDING.match(r["message"]), 120)[0]
    paused = run.events("paused")[0]
    m = FINDING.match(alert["message"])
    assert m.group(3) == time.strftime("%H:%M:%S", time.localtime(paused["ts"]))
    assert before - 1 <= paused["ts"] <= time.time()
    assert alert["culprits"] == [1] and alert["waiting"] == [0, 2] and alert["key"] == "hang:1"
    # one finding, in place; the status's own analysis says the same once the finding has caught up
    st = wait_for(lambda: (lambda st: st if [a["message"] for a in st["alerts"] if a["kind"] == "hang"]
                           == [st["straggler"]["text"]] else None)(run.status()), 30, what="the finding in the status")
    assert FINDING.match(st["straggler"]["text"])
    # every hang alert of the run was this finding: the first one and its updates share its key
    assert {e["key"] for e in run.events("alert") if e.get("kind") == "hang"} == {"hang:1"}
    assert all(e.get("update") for e in [e for e in run.events("alert") if e.get("kind") == "hang"][1:])
    w1 = next(w for w in st["workers"] if w["rank"] == 1)
    assert w1["state"] == "paused" and w1["paused_at"] == pytest.approx(paused["ts"], abs=0.5)
    assert "likely culprit" not in run.stderr_text and "(p resumes)" in run.stderr_text

    run.ctl("resume", "1")
    wait_for(lambda: all(w["state"] == "running" for w in run.status()["workers"]), 120, what="every rank running")
    wait_for(lambda: not run.status()["alerts"], 60, what="the finding to leave the status")
    # events.jsonl is flushed within a second of the status: the finding's end is its last alert
    run.wait_event("alert", lambda e: e.get("key") == "hang:1" and e.get("ended"), 30)
    assert run.events("alert")[-1].get("ended") and run.status()["straggler"]["text"] is None
    # resumed, rank 1 is behind its peers for a moment: it is not blamed for that, the finding just ends
    resumed = run.events("resumed")[0]["ts"]
    after = [e for e in run.events("alert") if e["ts"] >= resumed]
    assert [bool(e.get("ended")) for e in after] == [True], after
    run.ctl("stop")
    run.wait_exit(60)
