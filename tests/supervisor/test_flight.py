"""The NCCL flight recorder (issue 20, item 8), MPWATCH_NCCL_FLIGHT=1: the workers get
TORCH_NCCL_ASYNC_ERROR_HANDLING=3, so that an abort does not lose the dump (1 without the
recorder, as torchrun; the user's own value wins); the ranks' dumps are read (torch's own
analyzer where it can, else mpwatch's) and the ranks that did not join the collective join
the hang finding. NCCL needs two GPUs: the hang here is gloo's, whose ranks write their own
flight-recorder dumps through torch where NCCL's watchdog would."""
import json
import os

import pytest

from mpwatch.supervisor.diagnose import flight_join
from tests.helpers import FIXTURES, need, wait_for

ENV_SCRIPT = FIXTURES / "print_env.py"


def worker_env(run) -> dict:
    out = wait_for(lambda: next((ln for ln in run.log(0).splitlines() if ln.startswith("ENV ")), None), 60,
                   what="the worker's environment")
    return json.loads(out[4:])


@pytest.mark.parametrize(("flight", "own", "want"), [(None, None, "1"), ("1", None, "3"), ("1", "2", "2")])
def test_async_error_handling_is_3_with_the_flight_recorder(headless, flight, own, want):
    env = {k: v for k, v in os.environ.items() if k not in ("MPWATCH_NCCL_FLIGHT", "TORCH_NCCL_ASYNC_ERROR_HANDLING")}
    env.update({k: v for k, v in (("MPWATCH_NCCL_FLIGHT", flight), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", own)) if v})
    run = headless(ENV_SCRIPT, n=1, env=env)
    got = worker_env(run)
    assert got["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == want
    assert (got["TORCH_FR_BUFFER_SIZE"] is not None) == bool(flight)
    run.wait_exit(60)


def test_torchs_analyzer_output_is_read():
    # the lines torch's analyzer logs for a collective not every rank joined (its EntryState.log)
    text = "\n".join(["Not all ranks joining collective, sequence number: 6", "internal record id: 5",
                      "group info: default_pg:0", "collective: nccl:all_reduce", "missing ranks: {1}",
                      "input sizes: [[4]]", "world size: 3"])
    f = flight_join.parse_torch(text, [0, 1, 2])
    assert f == flight_join.Finding("all_reduce", 6, [1], [0, 2], "torch's analyzer")
    assert flight_join.parse_torch("Traceback ...\nKeyError: ('0', 0)", [0, 1]) is None


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_the_flight_recorder_names_the_rank_that_did_not_join(headless):
    need("torch", "a flight recorder needs torch (the demo extra)")
    env = dict(os.environ, MPWATCH_NCCL_FLIGHT="1", HANG_RANK="1", HANG_STEP="5")
    run = headless(FIXTURES / "flight_hang.py", n=3, opts=["--stall-timeout", "6"], env=env)
    alert = run.wait_event("alert", lambda r: r.get("kind") == "hang" and "flight recorder" in r["message"], 180)[0]
    # the stacks alone cannot tell (every rank at step 4, the peers waiting in a Work's wait()): the dumps can
    assert alert["message"].startswith("ranks 0,2 wait in all_reduce #") and alert["message"].endswith(
        "for rank 1, which did not join it (flight recorder)"), alert["message"]
    assert alert["culprits"] == [1] and alert["waiting"] == [0, 2]
    assert "async error handling 3" in run.log(0)
    st = run.status()
    assert st["alerts"][-1]["message"] == alert["message"]
    run.ctl("stop")
    run.wait_exit(60)
