"""A CUDA out-of-memory message with a size of 320 digits (issue 39, item 1) once ended the
supervisor (an OverflowError in supervisor.gpu.oom_words, from the reaper's exit handling), and
with it every rank still training. Said on a rank's stderr or in its channel's OOM record, it is
now a size not known: the supervisor lives, the other ranks train on, the rank's cause is true
and the run ends with final.json."""
from __future__ import annotations

import pytest

from tests.faults.conftest import FAULTS, final
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)
CAUSES = {"stderr": "exit 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9999",
          "record": "exit 1: RuntimeError: gave up after an out-of-memory"}


@pytest.mark.parametrize("how", list(CAUSES))
def test_a_320_digit_oom_size_never_ends_the_supervisor(headless, how):
    run = headless(FAULTS / "huge_oom.py", how, n=3)
    run.wait_state(1, "failed", timeout=60)
    steps = {r: run.worker(r)["step"] or 0 for r in (0, 2)}
    wait_for(lambda: all((run.worker(r)["step"] or 0) >= steps[r] + 20 for r in (0, 2)),
             what="ranks 0 and 2 training on")
    assert run.proc.poll() is None
    oom = run.wait_event("gpu_alert", lambda e: e.get("kind") == "oom" and e["rank"] == 1)[0]
    assert "rank 1 ran out of CUDA memory" in oom["message"]
    run.ctl("stop")
    assert run.wait_exit(60) == 1
    w = {x["rank"]: x for x in final(run)["workers"]}
    assert w[1]["state"] == "failed" and w[1]["cause"].startswith(CAUSES[how]), w[1]["cause"][:200]
    assert [w[r]["state"] for r in (0, 2)] == ["killed", "killed"]
    assert "bad_inputs" not in w[1]  # a size not known, no fault
    run.assert_gone()
