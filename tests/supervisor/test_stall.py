"""Pure decisions about hung workers: is it stalled, what is it doing, who is the culprit,
and the NCCL flight recorder's bookkeeping. No processes here."""
import pickle

from mpwatch import cli
from mpwatch.cli import launch
from mpwatch.contract import culprit
from mpwatch.probes import hang, pyspy
from mpwatch.supervisor.diagnose import flight, stall
from tests.documented import STALL_TIMEOUT_S, STARTUP_TIMEOUT_S


# ------------------------------------------------------------------ is_stalled ----
def test_a_worker_that_has_not_reported_is_never_stalled():
    assert not stall.is_stalled(1000.0, timeout=5, first_report=None, last_report=None)


def test_the_stall_clock_starts_at_the_first_report():
    # 8 s of start-up, then a report: not stalled 3 s after it with a 5 s timeout
    assert not stall.is_stalled(11.0, timeout=5, first_report=8.0, last_report=8.0)
    assert stall.is_stalled(13.1, timeout=5, first_report=8.0, last_report=8.0)


def test_stalled_after_timeout_since_last_report():
    kw = dict(timeout=5, first_report=1.0, last_report=10.0)
    assert not stall.is_stalled(15.0, **kw)
    assert stall.is_stalled(15.1, **kw)


def test_time_paused_does_not_count():
    kw = dict(timeout=5, first_report=1.0, last_report=10.0, resumed=100.0)
    assert not stall.is_stalled(104.0, **kw)
    assert stall.is_stalled(106.0, **kw)


def test_a_slow_start_is_a_worker_that_said_hello_and_has_not_reported_within_the_limit():
    kw = dict(limit=600, started=0.0, first_report=None)
    assert not stall.is_slow_start(599.0, connected=True, **kw)
    assert stall.is_slow_start(601.0, connected=True, **kw)
    assert not stall.is_slow_start(5000.0, connected=False, **kw)  # never imported mpwatch: nothing to wait for
    assert not stall.is_slow_start(5000.0, limit=600, started=0.0, connected=True, first_report=3.0)
    assert not stall.is_slow_start(650.0, connected=True, resumed=100.0, **kw)  # paused 100 s of it


def _default_options(tmp_path):
    """The supervisor's options of `mpwatch train.py`, as the command line builds them."""
    script = tmp_path / "train.py"
    script.write_text("")
    return launch.options(cli.run_parser({}).parse_args([str(script)]), {})


def test_the_documented_stall_timeout_is_the_default_and_stalls_at_it(tmp_path):
    """docs/hangs.md: silent for --stall-timeout seconds (default 60) after a report is stalled:
    just short of it, not; just past it (the next tick), stalled."""
    kw = dict(timeout=_default_options(tmp_path).stall_timeout, first_report=1.0, last_report=10.0)
    assert not stall.is_stalled(10.0 + STALL_TIMEOUT_S - 0.01, **kw)
    assert stall.is_stalled(10.0 + STALL_TIMEOUT_S + 0.01, **kw)


def test_the_documented_startup_timeout_is_the_default_and_is_a_slow_start_at_it(tmp_path):
    """docs/hangs.md: no first report --startup-timeout after the start (default 600 s) is a slow start."""
    kw = dict(limit=_default_options(tmp_path).startup_timeout, started=5.0, first_report=None, connected=True)
    assert not stall.is_slow_start(5.0 + STARTUP_TIMEOUT_S - 0.01, **kw)
    assert stall.is_slow_start(5.0 + STARTUP_TIMEOUT_S + 0.01, **kw)


# -------------------------------------------------------------------- classify ----
def facts(states, wchan=None, syscall=None, threads=None, nvidia=False):
    return {"pid": 1, "states": states, "wchan": wchan, "syscall": syscall,
            "threads": threads or {1: states[-1] if states else "S"}, "nvidia": nvidia}


def test_blocked_names_the_wait_channel():
    d = hang.classify(facts(["S", "S", "S"], wchan="futex_do_wait", syscall="futex"), cpu_percent=0.0)
    assert d["kind"] == "blocked"
    assert d["wchan"] == "futex_do_wait"
    assert "futex_do_wait" in d["detail"]


def test_blocked_falls_back_to_the_syscall_when_wchan_is_hidden():
    d = hang.classify(facts(["S"], wchan=None, syscall="read"), cpu_percent=1.0)
    assert d["kind"] == "blocked" and "in read" in d["detail"]


def test_busy_when_main_thread_runs():
    d = hang.classify(facts(["R", "R", "S"]), cpu_percent=99.0)
    assert d["kind"] == "busy"
    assert "CUDA" not in d["detail"]


def test_busy_when_other_threads_burn_cpu():
    d = hang.classify(facts(["S", "S", "S"], threads={1: "S", 2: "R"}), cpu_percent=95.0)
    assert d["kind"] == "busy" and "other thread" in d["detail"]


def test_busy_gpu_worker_may_be_a_hung_kernel():
    for kw in ({"cuda": True}, {}):
        d = hang.classify(facts(["R"], nvidia=not kw), cpu_percent=100.0, **kw)
        assert d["kind"] == "busy"
        assert "hung CUDA kernel" in d["detail"]


def test_stopped_zombie_uninterruptible_gone():
    assert hang.classify(facts(["T"]))["kind"] == "stopped"
    assert "tracer" in hang.classify(facts(["t"]))["detail"]
    assert hang.classify(facts(["Z"]))["kind"] == "zombie"
    d = hang.classify(facts(["D", "D", "S"], wchan="nfs_wait_bit_killable"))
    assert d["kind"] == "uninterruptible" and "nfs_wait_bit_killable" in d["detail"]
    assert hang.classify(facts([]))["kind"] == "gone"


def test_majority_of_reads_wins():
    # One read caught a blocked thread in a brief wake-up: it is still blocked.
    assert hang.classify(facts(["S", "R", "S"]), cpu_percent=2.0)["kind"] == "blocked"


# ------------------------------------------------------------------- culprit ----
def W(rank, step, state="stalled", paused_at=None, dist=True, **stall_info):
    """A row of ranks that share a process group (dist), as a DDP job's say."""
    return {"rank": rank, "step": step, "state": state, "stall": stall_info or None, "paused_at": paused_at,
            "dist": dist}


def test_independent_workers_wait_for_nobody():
    # no process group said, no stack in a collective: a rank behind or paused is no culprit
    s = culprit.analyze([W(0, 119, dist=False), W(1, 50, "running", dist=False), W(2, 4, "paused", dist=False)])
    assert s["culprits"] == [] and s["text"] == "rank 0 stalled at step 119; ranks 1,2 are not stalled (leading step 119)"
    # ...but a stalled rank's stack in a collective says they share one
    s = culprit.analyze([W(0, 119, dist=False, collective="all_reduce"), W(1, 118, dist=False)])
    assert s["culprits"] == [1]


def test_rank_behind_while_others_wait_is_the_culprit():
    s = culprit.analyze([W(0, 119), W(1, 119), W(2, 118), W(3, 119)])
    assert s["culprits"] == [2] and s["waiting"] == [0, 1, 3]
    assert s["text"] == "ranks 0,1,3 wait at step 119 for rank 2, which is at step 118"
    assert {x["rank"]: x["lag"] for x in s["lags"]} == {0: 0, 1: 0, 2: 1, 3: 0}


def test_culprit_lagging_but_not_yet_flagged_is_still_named():
    s = culprit.analyze([W(0, 50), W(1, 48, "running"), W(2, 50)])
    assert s["culprits"] == [1]


def test_same_step_culprit_found_from_stacks():
    s = culprit.analyze([W(0, 5, collective="all_reduce", where="main (t.py:3)"),
                           W(1, 5, where="load (t.py:9)"),
                           W(2, 5, collective="all_reduce", where="main (t.py:3)")])
    assert s["culprits"] == [1] and s["waiting"] == [0, 2]
    assert s["text"] == "ranks 0,2 wait in all_reduce at step 5 for rank 1, which is at step 5 (in load (t.py:9))"


def test_a_paused_rank_is_named_as_the_cause_with_the_time_it_was_paused():
    import time
    at = time.mktime((2026, 1, 1, 17, 35, 20, 0, 0, -1))  # local time, as the finding says it
    ws = [W(0, 84, collective="all_reduce"), W(1, 83, "paused", paused_at=at), W(2, 84, collective="all_reduce")]
    s = culprit.analyze(ws)
    assert s["culprits"] == [1] and s["waiting"] == [0, 2]
    assert s["text"] == "ranks 0,2 wait in all_reduce at step 84 for rank 1, which was paused at 17:35:20 (p resumes)"
    # paused after its report, before the collective: at the same step as its peers, still the cause
    ws[1]["step"] = 84
    assert culprit.analyze(ws)["culprits"] == [1]
    # before its peers stall there is no finding, only lags
    assert culprit.analyze([W(0, 84, "running"), W(1, 83, "paused", paused_at=at)])["text"] is None


def test_no_culprit_when_nothing_tells_them_apart():
    s = culprit.analyze([W(0, 5), W(1, 5)])
    assert s["culprits"] == [] and "no rank lags" in s["text"]


def test_a_running_leader_is_not_waiting():
    s = culprit.analyze([W(0, 200, "running"), W(1, 2), W(2, 2)])
    assert s["culprits"] == []
    assert s["text"] == "ranks 1,2 stalled at step 2; rank 0 is not stalled (leading step 200)"


def test_healthy_run_has_lags_but_no_text():
    s = culprit.analyze([W(0, 10, "running"), W(1, 9, "running")])
    assert s["text"] is None and s["culprits"] == []
    assert culprit.analyze([W(0, 10)]) is None
    assert culprit.analyze([W(0, None), W(1, 3)]) is None


# ---------------------------------------------------------------------- py-spy ----
def test_pyspy_output_is_judged_by_content_not_exit_code():
    good = 'Process 12: python x.py\nPython v3.11.7\n\nThread 12 (idle): "MainThread"\n    f (x.py:3)\n'
    assert pyspy.judge(good) == (True, None)
    ok, note = pyspy.judge("Error: Failed to get process executable name.\n\nCaused by:\n"
                           "    0: Permission denied (os error 13)\n")
    assert not ok and "ptrace not permitted" in note
    ok, note = pyspy.judge("Error: Failed to find python version from target process\n")
    assert not ok and note.startswith("py-spy failed: Error: Failed to find python version")


# ---------------------------------------------------------------------- flight ----
def test_flight_vars(tmp_path):
    env = flight.apply({"TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}, tmp_path / "rank-3")
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"  # the user's choice wins
    assert int(env["TORCH_FR_BUFFER_SIZE"]) > 0 and env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == env["TORCH_FR_BUFFER_SIZE"]
    assert env["TORCH_FR_DUMP_TEMP_FILE"].endswith("rank-3/nccl_trace_rank_")
    assert env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"].endswith("rank-3/nccl_pipe_")


def test_flight_trigger_without_reader_says_why(tmp_path):
    assert "no flight-recorder pipe" in flight.trigger(tmp_path, 0)
    import os
    os.mkfifo(tmp_path / "nccl_pipe_0.pipe")
    assert "No such device" in flight.trigger(tmp_path, 0)  # ENXIO: no process reads it


def test_flight_not_joined_names_missing_ranks(tmp_path):
    def e(seq, name="nccl:all_reduce", pg=0):
        return {"collective_seq_id": seq, "profiling_name": name, "pg_id": pg}
    traces = {0: {"entries": [e(1), e(2), e(3)]}, 1: {"entries": [e(1), e(2)]}, 2: {"entries": [e(2), e(3)]}}
    assert flight.not_joined(traces) == {"0": {"seq": 3, "op": "nccl:all_reduce", "missing": [1]}}
    assert flight.not_joined({0: {"entries": []}}) is None
    path = tmp_path / "t"
    path.write_bytes(pickle.dumps(traces[0]))
    assert flight.read_trace(path) == traces[0]
    path.write_bytes(pickle.dumps(range(3)))  # names a class: refused, never built
    assert flight.read_trace(path) is None


# ------------------------------------------------------------------ steps/s ----
def test_steps_per_second_of_a_silent_worker_decays_toward_zero():
    from mpwatch.supervisor.workers.worker import Attempt

    a = Attempt(None, 1)
    for i in range(33):  # 25 steps/s, a batch every 0.25 s, for 8 s
        a.rate.append((100.0 + 0.25 * i, 6 * i + (i // 4)))
    fresh = a.steps_per_second(108.1)
    assert fresh == a.steps_per_second() and 24 < fresh < 26
    later = [a.steps_per_second(t) for t in (110.0, 120.0, 138.0, 400.0)]
    assert later == sorted(later, reverse=True) and later[0] < fresh
    assert later[2] < 6.0 and later[3] < 0.7  # 30 s silent: a fifth of it; minutes: nearly 0


def test_a_worker_that_stopped_stepping_reads_no_rate_within_seconds_and_a_slow_stepper_keeps_its_own():
    """Issue 40: a rank blocked behind a paused peer read 53 steps/s 12 s after its last step. It
    reads 0 once it has not stepped for QUIET_S (and three of its usual gaps between steps); a
    rank whose steps take 10 s, reporting in between, keeps its rate between its steps."""
    from mpwatch.contract import rates
    from mpwatch.supervisor.workers.worker import Attempt

    a = Attempt(None, 1)
    for i in range(33):  # 25 steps/s, a batch every 0.25 s, for 8 s; then nothing
        a.rate.append((100.0 + 0.25 * i, 6 * i + (i // 4)))
    assert a.steps_per_second(109.9) > 20  # silent under 2 s: a batch late, no more
    assert a.steps_per_second(108.0 + rates.QUIET_S + 0.01) == 0.0
    slow = [(100.0 + 0.5 * i, i // 20) for i in range(32)]  # a step every 10 s, a report every 0.5 s
    assert rates.steps_per_second(slow, 116.0) is not None and rates.steps_per_second(slow, 116.0) > 0.05
    assert rates.steps_per_second(slow, 100.0 + 10 + 3 * 10 + 1) == 0.0  # three of its gaps without a step
