"""Issue 2: launch, reports, pause/resume, kill, restart, resize, max-restarts — real processes."""
import json
import os
import re
import signal

import psutil
import pytest

from tests.helpers import FIXTURES, alive, assert_gone, mpwatch, wait_for

pytestmark = pytest.mark.timeout(180)


def env_lines(run, rank):
    """The ENV lines forever.py printed, one per start of that rank."""
    text = run.log(rank)
    return [json.loads(m) for m in re.findall(r"^ENV (.*)$", text, re.M)]


def running_with_steps(run, n, min_step=2):
    st = run.status()
    ws = st["workers"]
    ok = len(ws) == n and all(w["state"] == "running" and (w["step"] or 0) >= min_step for w in ws)
    return st if ok else None


def test_launch_sets_torchrun_env_and_reports_arrive(headless):
    run = headless(FIXTURES / "forever.py", n=2)
    st = wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    pids = [w["pid"] for w in st["workers"]]
    port = None
    for rank, pid in enumerate(pids):
        env = wait_for(lambda: env_lines(run, rank), what="ENV line")[0]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        port = port or env["MASTER_PORT"]
        assert env["MASTER_PORT"] == port and int(port) > 0
        # Each worker leads its own session and process group.
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    w0 = st["workers"][0]
    assert w0["heartbeat"] == "ok" and w0["heartbeat_age"] is not None
    assert w0["loss"] == pytest.approx(1.0 / (w0["step"] + 1))
    assert len(w0["loss_tail"]) >= 2
    # events.jsonl is flushed within a second
    reports = wait_for(lambda: (lambda rs: rs if {r["rank"] for r in rs} == {0, 1} else None)(run.events("report")),
                       what="report events of both ranks")
    assert all({"ts", "event", "rank", "step", "loss"} <= set(r) for r in reports)
    run.ctl("stop")
    assert run.wait_exit() == 1  # stopped by SIGTERM: not every worker ended with 0
    assert_gone(pids)


def test_clean_run_exits_zero_with_full_event_log(headless):
    run = headless(FIXTURES / "reporter.py", "15", n=2)
    assert run.wait_exit() == 0
    kinds = [e["event"] for e in run.events()]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("worker_started") == 2 and kinds.count("worker_exited") == 2
    exited = run.events("worker_exited")
    assert all(e["exit_code"] == 0 and e["state"] == "exited" for e in exited)
    last = {r["rank"]: r["step"] for r in run.events("report")}
    assert last == {0: 14, 1: 14}
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["exit_code"] == 0 and info["script"].endswith("reporter.py")
    # the run's first event is the run's start, to the microsecond (a replay shows it at +0.0s)
    assert run.events()[0]["ts"] == pytest.approx(info["started"], abs=1e-6)
    final = json.loads((run.run_dir / "final.json").read_text())
    assert [w["state"] for w in final["workers"]] == ["exited", "exited"]


def test_folded_reports_are_all_counted_in_status_and_events(headless):
    # 3001 report() calls in bursts: the sender folds them, yet every call is counted, the
    # one-off metric is kept, and the report events add up to the same count.
    run = headless(FIXTURES / "burst.py", n=1)
    assert run.wait_exit() == 0
    w = json.loads((run.run_dir / "final.json").read_text())["workers"][0]
    assert w["reports"] == 3001 and w["dropped"] == 0 and w["step"] == 2999
    assert w["metrics"]["once"] == 7
    reports = run.events("report")
    assert sum(r["n"] for r in reports) == w["reports"]
    assert sum(r["dropped"] for r in reports) == 0
    assert reports[-1]["step"] == 2999 and reports[-1]["loss"] == pytest.approx(1 / 3000)
    assert any(r["metrics"].get("once") == 7 for r in reports)


def test_pause_stops_the_group_and_resume_continues(headless):
    run = headless(FIXTURES / "forever.py", n=2)
    st = wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    pid = st["workers"][0]["pid"]
    out = run.ctl("pause", "0").stdout
    assert "paused rank 0" in out
    wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, what="stopped state")
    assert run.worker(0)["state"] == "paused"
    assert run.worker(0)["steps_per_s"] == 0.0  # no stale rate while paused
    assert run.wait_event("paused")[0]["rank"] == 0
    # Pausing twice says so and fails.
    again = run.ctl("pause", "0", check=False)
    assert again.returncode == 2 and "already paused" in again.stderr
    step = run.worker(0)["step"]
    run.ctl("resume", "0")
    wait_for(lambda: psutil.Process(pid).status() != psutil.STATUS_STOPPED, what="running again")
    wait_for(lambda: (run.worker(0)["step"] or 0) > step + 2, what="steps after resume")
    assert run.worker(0)["state"] == "running" and run.wait_event("resumed")


def test_kill_reaches_a_child_that_ignores_sigterm(headless):
    run = headless(FIXTURES / "child_ignores_term.py", n=2, opts=["--grace", "1"])
    wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    text = wait_for(lambda: re.search(r"CHILD (\d+)", run.log(0)),
                    what="child pid")
    child = int(text.group(1))
    worker = run.worker(0)["pid"]
    assert "killing rank 0" in run.ctl("kill", "0").stdout
    run.wait_state(0, "killed")
    assert_gone([worker, child])
    assert run.worker(1)["state"] == "running"
    exited = run.wait_event("worker_exited", lambda e: e["rank"] == 0)[0]
    assert exited["reason"] == "kill"


def test_restart_starts_the_same_rank_again(headless):
    run = headless(FIXTURES / "forever.py", n=2, opts=["--grace", "2"])
    st = wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    old = st["workers"][1]["pid"]
    run.ctl("restart", "1")
    ev = run.wait_event("restarted", lambda e: e["rank"] == 1)[0]
    assert ev["pid"] != old
    w = wait_for(lambda: (lambda w: w if w["state"] == "running" and w["pid"] != old else None)(run.worker(1)),
                 what="rank 1 running again")
    assert w["restarts"] == 1
    assert_gone([old])
    assert len(env_lines(run, 1)) == 2 and env_lines(run, 1)[1]["RANK"] == "1"


def test_resize_restart_mode_restarts_everyone_with_new_world(headless):
    run = headless(FIXTURES / "forever.py", n=2, opts=["--grace", "2"])
    st = wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    old = [w["pid"] for w in st["workers"]]
    assert "resizing from 2 to 3" in run.ctl("resize", "3").stdout
    run.wait_event("resized")
    wait_for(lambda: running_with_steps(run, 3, min_step=1), what="3 ranks reporting")
    assert_gone(old)
    for rank in range(3):
        assert env_lines(run, rank)[-1]["WORLD_SIZE"] == "3"
    assert run.status()["run"]["world_size"] == 3


def test_resize_independent_adds_and_removes_ranks_only(headless):
    run = headless(FIXTURES / "forever.py", n=2, opts=["--grace", "2", "--resize-mode", "independent"])
    st = wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    before = {w["rank"]: w["pid"] for w in st["workers"]}
    run.ctl("resize", "3")
    st = wait_for(lambda: running_with_steps(run, 3, min_step=1), what="3 ranks reporting")
    after = {w["rank"]: w["pid"] for w in st["workers"]}
    assert after[0] == before[0] and after[1] == before[1]
    run.ctl("resize", "1")
    wait_for(lambda: [w["rank"] for w in run.status()["workers"]] == [0], what="ranks 1-2 removed")
    assert run.worker(0)["pid"] == before[0]
    assert_gone([after[1], after[2]])
    assert alive(before[0])
    run.ctl("stop")
    run.wait_exit(60)
    summary = mpwatch("summary", run.run_dir).stdout  # the count it ended with, and the start's
    assert " · 1 worker (2 at the start) · " in summary, summary


def test_max_restarts_restarts_failed_workers(headless, tmp_path):
    run = headless(FIXTURES / "fail_once.py", tmp_path, "1", n=2, opts=["--max-restarts", "1"])
    assert run.wait_exit() == 0
    restarted = run.events("restarted")
    assert sorted(e["rank"] for e in restarted) == [0, 1]
    assert all("exit 3" in e["why"] for e in restarted)
    failed = [e for e in run.events("worker_exited") if e["state"] == "failed"]
    assert len(failed) == 2 and all("failing on purpose" in e["cause"] for e in failed)


def test_without_restarts_a_failure_ends_the_run_with_1(headless, tmp_path):
    run = headless(FIXTURES / "fail_once.py", tmp_path, "5", n=1, opts=["--max-restarts", "1"])
    assert run.wait_exit() == 1
    assert len(run.events("restarted")) == 1  # one restart, then it stays failed
    final = json.loads((run.run_dir / "final.json").read_text())
    assert final["workers"][0]["state"] == "failed"
    assert final["workers"][0]["cause"] == "exit 3: attempt 1 failing on purpose"


@pytest.mark.parametrize("script, needle", [
    ("crash.py", "ZeroDivisionError: division by zero"),
    ("syntax_error.py", "SyntaxError: invalid syntax (syntax_error.py:1)"),
    ("import_error.py", "ModuleNotFoundError: No module named 'no_such_module_for_mpwatch_tests'"),
])
def test_a_crash_is_shown_with_its_cause(headless, script, needle):
    run = headless(FIXTURES / script, n=1)
    assert run.wait_exit() == 1
    ev = run.events("worker_exited")[0]
    assert ev["state"] == "failed" and ev["exit_code"] == 1
    assert needle in ev["cause"]
    assert any(needle.split(" (")[0] in line for line in ev["stderr_tail"])
    assert needle in run.stderr_text  # the headless status line says it too


def test_stdout_and_stderr_are_complete_in_the_files(headless):
    n = 20000
    run = headless(FIXTURES / "chatty.py", str(n), n=1)
    assert run.wait_exit() == 0
    out = run.log(0).splitlines()
    err = (run.run_dir / "rank-0" / "stderr.log").read_text().splitlines()
    assert out == [f"out {i}" for i in range(n)]
    assert err == [f"err {i}" for i in range(n)]


def test_sigkilled_supervisor_leaves_no_worker_or_grandchild(headless):
    run = headless(FIXTURES / "grandchild.py", n=2)
    wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    grand = []
    for rank in range(2):
        m = wait_for(lambda: re.search(r"GRANDCHILD (\d+)", run.log(rank)),
                     what="grandchild pid")
        grand.append(int(m.group(1)))
    pids = run.all_pids() | set(grand)
    assert len(pids) >= 4 and all(alive(p) for p in pids)
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    assert_gone(pids, timeout=60)  # waited for: only the watchdog and the parent-death signal end them


def test_sigterm_to_supervisor_is_a_clean_stop(headless):
    run = headless(FIXTURES / "grandchild.py", n=2, opts=["--grace", "1"])
    wait_for(lambda: running_with_steps(run, 2), what="both ranks reporting")
    pids = run.all_pids()
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait_exit() == 1
    assert_gone(pids)
    assert run.events("run_finished")
    assert run.events("stopping")[0]["why"] == "signal SIGTERM"


def test_unmodified_script_has_no_heartbeat_and_is_never_stalled(headless):
    run = headless(FIXTURES / "no_report.py", n=1, opts=["--stall-timeout", "1"])
    w = wait_for(lambda: (lambda w: w if (w["uptime"] or 0) > 3 else None)(run.worker(0)), what="3 s of uptime")
    assert w["state"] == "running" and w["heartbeat"] == "none"
    assert not run.events("stalled")


def test_status_tail_caps_the_loss_points_and_a_second_connection_works(headless):
    from mpwatch.sources.local import Client, ClientError

    run = headless(FIXTURES / "forever.py", n=1)
    wait_for(lambda: running_with_steps(run, 1, min_step=40), what="40 steps")
    with Client.at(run.run_dir) as c, c.another() as c2:
        assert len(c.status()["workers"][0]["loss_tail"]) == 32
        assert len(c2.status(tail=12)["workers"][0]["loss_tail"]) == 12
        assert c.status(tail=0)["workers"][0]["loss_tail"] == []
        with pytest.raises(ClientError, match="'tail' must be an integer"):
            c2.status(tail=-1)
