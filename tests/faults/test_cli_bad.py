"""Every flag with a wrong value, scripts that cannot run, RUNs that do not exist or have ended:
one line on stderr naming the cause, exit code 2, never a traceback (issue 8)."""
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tests.faults.conftest import FAULTS, reporting
from tests.helpers import FIXTURES, mpwatch, one_line_error, wait_for

pytestmark = pytest.mark.timeout(120)

SCRIPT = str(FIXTURES / "reporter.py")

BAD_RUN_ARGS = [
    ([], "the following arguments are required: SCRIPT"),
    (["--bogus", SCRIPT], "unrecognized arguments: --bogus"),
    (["-n", "0", SCRIPT], "must be at least 1, got 0"),
    (["-n", "-3", SCRIPT], "must be at least 1, got -3"),
    (["-n", "two", SCRIPT], "expected a whole number, got 'two'"),
    (["-n", "1.5", SCRIPT], "expected a whole number"),
    (["-n", "", SCRIPT], "expected a whole number"),
    (["-n"], "expected one argument"),
    (["--max-restarts", "-1", SCRIPT], "must not be negative"),
    (["--max-restarts", "many", SCRIPT], "expected a whole number"),
    (["--stall-timeout", "0", SCRIPT], "positive number of seconds"),
    (["--stall-timeout", "-5", SCRIPT], "positive number of seconds"),
    (["--stall-timeout", "nan", SCRIPT], "positive number of seconds"),
    (["--stall-timeout", "inf", SCRIPT], "positive number of seconds"),
    (["--stall-timeout", "soon", SCRIPT], "expected seconds, got 'soon'"),
    (["--startup-timeout", "0", SCRIPT], "positive number of seconds"),
    (["--startup-timeout", "later", SCRIPT], "expected seconds, got 'later'"),
    (["--grace", "-1", SCRIPT], "non-negative number of seconds"),
    (["--grace", "nan", SCRIPT], "non-negative number of seconds"),
    (["--grace", "1e999", SCRIPT], "non-negative number of seconds"),
    (["--gpu-interval", "0", SCRIPT], "positive number of seconds"),
    (["--gpu-interval", "x", SCRIPT], "expected seconds"),
    (["--resize-mode", "elastic", SCRIPT], "invalid choice: 'elastic'"),
    (["/no/such/train.py"], "script not found: /no/such/train.py"),
    ([str(FIXTURES)], "is a directory, not a script"),
    (["--run-dir", SCRIPT, SCRIPT], "exists and is not a directory"),
]

BAD_OTHER = [
    (["ls", "--bogus"], "unrecognized arguments: --bogus"),
    (["ctl"], "required: ACTION"),
    (["ctl", "frobnicate"], "invalid choice: 'frobnicate'"),
    (["ctl", "pause"], "required: RANK|all"),
    (["ctl", "pause", "zero"], "expected a rank number or 'all', got 'zero'"),
    (["ctl", "kill", "-1"], "a rank is not negative"),
    (["ctl", "resize", "0"], "must be at least 1"),
    (["ctl", "resize", "lots"], "expected a whole number"),
    (["ctl", "status", "--yaml"], "unrecognized arguments: --yaml"),
    (["ctl", "--run", "no-such-run-id", "status"], "no such run: no-such-run-id"),
    (["ctl", "--run", "/no/such/dir", "stop"], "no such run: /no/such/dir"),
    (["ctl", "--run", "/", "status"], "/ is not an mpwatch run directory"),
    (["attach", "no-such-run-id"], "no such run: no-such-run-id"),
    (["attach", "/no/such/dir"], "no such run: /no/such/dir"),
    (["ls", "--all", "/no/such/dir"], "no such folder: /no/such/dir"),
    (["ls", "somewhere"], "folders are looked in with --all only"),
    (["summary"], "the following arguments are required: RUN"),
    (["summary", "no-such-run-id"], "no such run: no-such-run-id"),
    (["summary", "/"], "/ is not an mpwatch run directory"),
    (["summary", "/etc/hostname"], "/etc/hostname is not a run directory (not a directory)"),
    (["summary", "--yaml", "x"], "unrecognized arguments: --yaml"),
    (["prune"], "say what to remove"),
    (["prune", "--keep", "x"], "expected a whole number"),
    (["ctl", "logs"], "required: RANK"),
    (["ctl", "logs", "all"], "logs are read one rank at a time"),
    (["ctl", "logs", "-2"], "a rank is not negative"),
    (["ctl", "logs", "0", "--lines", "many"], "expected a whole number"),
    (["ctl", "--run", "/no/such/dir", "logs", "0"], "no such run: /no/such/dir"),
]

# A bad MPWATCH_* value (issue 22 item 7, settings.Settings): one line at the command's start.
RUN1 = ["--headless", "-n", "1", SCRIPT]
BAD_ENV = [
    ({"MPWATCH_EVENTS_MB": "inf"}, RUN1, "MPWATCH_EVENTS_MB=inf: not a finite number"),
    ({"MPWATCH_EVENTS_MB": "1e400"}, RUN1, "MPWATCH_EVENTS_MB=1e400: not a finite number"),
    ({"MPWATCH_EVENTS_MB": "abc"}, RUN1[1:], "MPWATCH_EVENTS_MB=abc: not a number"),  # the TUI's way in
    ({"MPWATCH_GPU_TIMELINE_MB": "inf"}, RUN1, "MPWATCH_GPU_TIMELINE_MB=inf: not a finite number"),
    ({"MPWATCH_NODE_LOST_S": "abc"}, RUN1, "MPWATCH_NODE_LOST_S=abc: not a number"),
    ({"MPWATCH_GPU_MEM_ALERT": "250"}, RUN1, "MPWATCH_GPU_MEM_ALERT=250: a fraction (0.9) or a percentage"),
    ({"MPWATCH_SSH": "ssh -o 'x"}, ["ls", "--host", "gpu-3"], "MPWATCH_SSH=ssh -o 'x: not a command line"),
    ({"MPWATCH_SSH": "ssh -o 'x"}, ["ctl", "--host", "gpu-3", "status"], "MPWATCH_SSH=ssh -o 'x: not a"),
    ({"MPWATCH_SSH": "ssh -o 'x"}, ["attach", "gpu-3:run"], "MPWATCH_SSH=ssh -o 'x: not a command line"),
    ({"MPWATCH_TMPDIR": "relative", "XDG_RUNTIME_DIR": ""}, ["ls"], "MPWATCH_TMPDIR=relative: an absolute"),
]


@pytest.mark.parametrize("env,args,words", BAD_ENV, ids=[f"{min(e)}-{a[0]}" for e, a, _ in BAD_ENV])
def test_bad_setting_is_one_line_at_start(tmp_path, env, args, words):
    res = mpwatch(*args, cwd=tmp_path, env={**os.environ, **env})
    one_line_error(res, words)
    assert not (tmp_path / "mpwatch-runs").exists(), "nothing is started with a bad setting"


@pytest.mark.parametrize("args,words", BAD_RUN_ARGS, ids=[" ".join(a)[-40:] or "none" for a, _ in BAD_RUN_ARGS])
def test_bad_run_arguments(tmp_path, args, words):
    res = mpwatch(*args, cwd=tmp_path)
    one_line_error(res, words)
    assert not (tmp_path / "mpwatch-runs").exists(), "nothing is started for a bad command line"


@pytest.mark.parametrize("args,words", BAD_OTHER, ids=[" ".join(a) for a, _ in BAD_OTHER])
def test_bad_subcommand_arguments(tmp_path, args, words):
    one_line_error(mpwatch(*args, cwd=tmp_path), words)


def test_unreadable_script(tmp_path):
    script = tmp_path / "secret.py"
    script.write_text("print('hi')\n")
    script.chmod(0)
    if os.access(script, os.R_OK):
        pytest.skip("this user reads a mode-000 file (root): test_unreadable_script_as_another_user asks as nobody")
    one_line_error(mpwatch("--headless", script, cwd=tmp_path), f"script is not readable: {script}")


def test_unreadable_script_as_another_user(nobody):
    """Root's script, mode 0600, where uid 65534 reaches it but cannot read it."""
    script = nobody.shared("scripts") / "secret.py"
    script.write_text("print('hi')\n")
    script.chmod(0o600)
    one_line_error(nobody.mpwatch("--headless", script), f"script is not readable: {script}")


def test_run_dir_that_already_holds_a_run(headless, tmp_path):
    run = headless(SCRIPT, "2", n=1)
    assert run.wait_exit() == 0
    res = mpwatch("--headless", "--run-dir", run.run_dir, SCRIPT, cwd=tmp_path)
    one_line_error(res, "already holds a run")


def test_ctl_and_attach_against_a_finished_run(headless):
    run = headless(SCRIPT, "2", n=1)
    assert run.wait_exit() == 0
    # (`attach` on it opens the replay instead: tests/replay/test_show_tmux.py)
    for args in (["ctl", "--run", run.run_dir, "status"], ["ctl", "--run", run.run_dir, "stop"]):
        one_line_error(mpwatch(*args), "has finished (exit code 0)")


def test_ctl_against_a_run_whose_supervisor_was_killed(headless):
    run = headless(FAULTS / "steady.py", n=1)
    wait_for(lambda: reporting(run, 1), what="rank 0 reporting")
    pids = run.all_pids()
    os.kill(run.proc.pid, signal.SIGKILL)
    run.wait_exit()
    run.assert_gone(*pids)
    one_line_error(mpwatch("ctl", "--run", run.run_dir, "status"), "is not running (its supervisor is gone)")


def test_a_runtime_directory_too_deep_for_a_socket(tmp_path):
    """A run whose socket's path in the runtime directory would pass AF_UNIX's 107 bytes is refused
    in one line before anything starts, never a traceback; a short one beside it runs."""
    deep = tmp_path / ("d" * 90)
    deep.mkdir(mode=0o700)
    short = Path(tempfile.mkdtemp(prefix="mpw-", dir="/tmp"))
    try:
        res = mpwatch("--headless", "-n", "1", FIXTURES / "no_torch.py", tmp_path, cwd=tmp_path,
                      env={**os.environ, "XDG_RUNTIME_DIR": str(deep)})
        one_line_error(res, "its path passes 107 bytes (a shorter XDG_RUNTIME_DIR, or MPWATCH_TMPDIR")
        res = mpwatch("--headless", "-n", "1", FIXTURES / "no_torch.py", tmp_path, cwd=tmp_path,
                      env={**os.environ, "XDG_RUNTIME_DIR": str(short)}, timeout=120)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    finally:
        shutil.rmtree(short, ignore_errors=True)
