"""The supervisor itself killed, stopped by a signal, or hung up on (issue 8)."""
import json
import os
import signal
import time

import pytest

from tests.faults.conftest import FAULTS, final, helpers_of, pid_lines, reporting
from tests.helpers import alive, mpwatch, wait_for

pytestmark = pytest.mark.timeout(180)


def test_sigkilled_supervisor_leaves_no_worker_or_grandchild(headless):
    # Workers and their children ignore SIGTERM, and a grandchild sits two levels down.
    run = headless(FAULTS / "term_ignorers.py", "2", n=2)
    wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    made = pid_lines(run, 0, 3) + pid_lines(run, 1, 3)
    everything = run.all_pids() | set(made) | set(helpers_of(run.proc.pid))
    assert len(everything) >= 2 + 6 + 1 and all(alive(p) for p in everything)
    t0 = time.monotonic()
    os.kill(run.proc.pid, signal.SIGKILL)
    # parent-death signal + the watchdog's killpg: a second or two on an idle box (how fast is a
    # benchmark's business: a busy box may take longer, and only "all gone" is the guarantee)
    run.assert_gone(*everything)
    print(f"{len(everything)} processes gone {time.monotonic() - t0:.2f}s after the supervisor's SIGKILL")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_stops_the_run_cleanly(headless, sig):
    run = headless(FAULTS / "steady.py", "2", n=2)
    st = wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    kids = [c["pid"] for w in st["workers"] for c in w["children"]]
    everything = run.all_pids() | set(kids) | set(helpers_of(run.proc.pid))
    os.kill(run.proc.pid, sig)
    assert run.wait_exit(timeout=60) == 1  # stopped: not every worker ended with 0
    stopping = run.events("stopping")
    assert [e["why"] for e in stopping] == [f"signal {sig.name}"]
    assert run.events()[-1]["event"] == "run_finished"
    for w in final(run)["workers"]:
        assert w["state"] == "killed" and w["cause"] == "stopped with the run (SIGTERM)"
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["exit_code"] == 1 and info["finished"]
    run.assert_gone(*everything)
    live = json.loads(mpwatch("ls", "--json").stdout)
    assert run.run_dir.name not in {e["run_id"] for e in live}
    assert str(run.run_dir.resolve()) not in {e["run_dir"] for e in live}


def test_second_sigint_does_not_wait_for_the_grace_period(headless):
    run = headless(FAULTS / "term_ignorers.py", "1", n=2, opts=["--grace", "120"])
    wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    everything = run.all_pids() | set(pid_lines(run, 0, 2)) | set(pid_lines(run, 1, 2))
    os.kill(run.proc.pid, signal.SIGINT)
    run.wait_event("stopping")
    os.kill(run.proc.pid, signal.SIGINT)
    assert run.wait_exit(timeout=60) == 1  # far inside the 120 s grace
    run.assert_gone(*everything)


def test_sighup_never_ends_the_run(headless):
    run = headless(FAULTS / "steady.py", n=2)
    before = wait_for(lambda: reporting(run, 2), what="both ranks reporting")
    watchdog = helpers_of(run.proc.pid)
    # What a closed SSH session sends: SIGHUP to the terminal's process group.
    os.killpg(os.getpgid(run.proc.pid), signal.SIGHUP)
    steps = {w["rank"]: w["step"] for w in before["workers"]}
    after = wait_for(lambda: (lambda s: s if all(w["step"] >= steps[w["rank"]] + 20 for w in s["workers"])
                              else None)(run.status()), what="20 more steps on every rank after SIGHUP")
    assert run.proc.poll() is None
    assert [w["pid"] for w in after["workers"]] == [w["pid"] for w in before["workers"]]
    assert all(w["state"] == "running" for w in after["workers"])
    assert not run.events("stopping") and all(alive(p) for p in watchdog)
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone(*watchdog)
