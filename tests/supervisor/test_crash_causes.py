"""Issue 31, item 3: a rank that died of an exception whose message has many lines is named by
the exception's type and its message's first line, found from the traceback's end (its last
frame) whatever the message's length: in the status, `summary` and `ls --all`, which says the
run's exit code once. Real headless runs of scripts that raise (and torch.load's own refusal)."""
from __future__ import annotations

import pytest

from mpwatch.rundir import crash
from mpwatch.supervisor.workers import exits
from tests.cli.conftest import summary, summary_text
from tests.helpers import FIXTURES, mpwatch, need

pytestmark = pytest.mark.timeout(300)
EXC = "CheckpointRefused: the checkpoint was refused."  # (Python names no module for __main__)


def _ended(headless, script, *args):
    run = headless(script, *args, n=1)
    assert run.wait_exit(120) == 1
    (ex,) = run.events("worker_exited")
    return run, ex


@pytest.mark.parametrize("lines", [12, 400])  # under and over the 60 lines of stderr searched before
def test_a_multi_line_messages_cause_is_its_type_and_first_line(headless, lines):
    run, ex = _ended(headless, FIXTURES / "multiline_error.py", lines)
    assert ex["cause"] == f"exit 1: {EXC}", ex["cause"]
    text = summary_text(run.run_dir)
    assert "first failure: rank 0 at +" in text and f": exit 1: {EXC}" in text
    assert "the documentation says more" not in text
    (row,) = [ln for ln in mpwatch("ls", "--all", run.tmp).stdout.splitlines() if str(run.run_dir) in ln]
    assert "exit code 1: rank 0: CheckpointRefused:" in row, row  # the exit code said once (40 wide)
    assert "rank 0 exit 1" not in row


def test_torch_loads_weights_only_refusal_is_named(headless):
    need("torch")
    run, ex = _ended(headless, FIXTURES / "weights_only_load.py")
    assert ex["cause"].startswith("exit 1: _pickle.UnpicklingError: Weights only load failed."), ex["cause"]
    assert "\x1b" not in ex["cause"] and "?[" not in ex["cause"]  # torch's bold is no part of the words
    s = summary(run.run_dir)
    assert s["listing"]["first_failure"]["cause"] == ex["cause"]
    (row,) = [ln for ln in mpwatch("ls", "--all", run.tmp).stdout.splitlines() if str(run.run_dir) in ln]
    assert "exit code 1: rank 0: _pickle.Unpickling" in row, row  # (the ENDED column is 40 wide)


def test_the_exception_is_read_from_the_last_frame_down():
    frames = ["Traceback (most recent call last):", '  File "/x/train.py", line 9, in <module>',
              "    load()", "    ^^^^^^", '  File "/x/train.py", line 4, in load']
    msg = ["ValueError: the first line", "\tthe second", "", "the last line of many"]
    assert exits.judge(1, None, frames + msg).cause == "exit 1: ValueError: the first line"
    # the frames cut off above the tail: the last line, as before
    assert exits.judge(1, None, msg).cause == "exit 1: the last line of many"
    # torch prefixes each line with its rank; the frame's source is indented below the prefix
    ranked = [f"[rank1]: {ln}" for ln in frames + msg]
    assert exits.judge(1, None, ranked).cause == "exit 1: ValueError: the first line"
    # a message that starts on the line below its type
    assert exits.judge(1, None, frames + ["RuntimeError: ", "  the message", "more"]).cause == \
        "exit 1: RuntimeError: the message"
    # a chained exception: the last one
    chained = frames + ["KeyError: 'a'", "", "During handling of the above exception, another exception "
                                             "occurred:", "", *frames, "OSError: the last one", "with more"]
    assert exits.judge(1, None, chained).cause == "exit 1: OSError: the last one"


# Kineto's own lines, as a profile on a machine without a CUDA driver wrote them (issue 40)
KINETO = ["USDT:2026-12-06 06:53:39 18157:18157 SyncActivityProfilerHandler.cpp:39] profiler start",
          "USDT:2026-12-06 06:53:39 18157:18157 SyncActivityProfilerHandler.cpp:46] profiler stop",
          "ERROR:2026-12-06 06:53:39 18157:18157 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35",
          "STAGE:2024-01-01 10:00:00 1:1 ActivityProfilerController.cpp:312] Completed Stage: Warm Up"]


def test_a_profilers_own_log_lines_are_never_a_cause():
    assert all(crash.is_tool_noise(line) for line in KINETO)
    assert exits.judge(3, None, KINETO).cause == "exit 3"
    tail = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>', "ValueError: bad", *KINETO]
    assert exits.judge(1, None, tail).cause == "exit 1: ValueError: bad"
    assert exits.judge(1, None, ["my own last words", *KINETO]).cause == "exit 1: my own last words"
    assert not crash.is_tool_noise("ERROR: my loader failed at 10:00:00")  # a rank's own ERROR line


def test_after_a_profile_the_cause_is_the_ranks_own_not_the_profilers(headless):
    need("torch", "the fixture profiles with torch.profiler")
    run = headless(FIXTURES / "profile_then_exit.py", n=1)
    assert run.wait_exit(120) == 1
    (end,) = run.events("worker_exited")
    log = run.log(0, "stderr")
    if not any(crash.is_tool_noise(line) for line in log.splitlines()):
        pytest.skip("torch.profiler wrote no log line of its own here")
    assert end["cause"] == "exit 3", end
    assert not any(crash.is_tool_noise(line) for line in end["stderr_tail"]), end["stderr_tail"]
