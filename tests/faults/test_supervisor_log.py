"""A bug in a control command's handler is no refusal: the client reads "internal error: ...
(see supervisor.log)", supervisor.log holds its traceback, and the run goes on; a refusal
reads as before and logs nothing (issue 18, supervisor.errors). The supervisor runs in this
process (supervisor.core.Run on the test's main thread), so that monkeypatch can break a
handler; its workers are real processes, its clients real sockets."""
from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from mpwatch.cli import launch
from mpwatch.cli.args import run_parser
from mpwatch.cli.tui_launch import supervisor_argv
from mpwatch.rundir import claim, writer
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.sources.local import Client, ClientError
from mpwatch.supervisor import errors
from mpwatch.supervisor.commands import Commands
from mpwatch.supervisor.core import Options, Run
from tests.faults.conftest import FAULTS
from tests.helpers import FIXTURES, assert_gone, internal_errors, wait_for

pytestmark = pytest.mark.timeout(120)


def drive(run_dir, out: dict) -> None:
    """The client's side (a thread): ask, keep the answers, then stop the run whatever happened."""
    client = None
    try:
        client = wait_for(lambda: _connect(run_dir), what="the control socket")
        wait_for(lambda: client.status()["workers"][0]["state"] == "running", what="rank 0 running")
        for name, ask in (("pause", lambda: client.act("pause", 0)), ("logs", lambda: client.logs(0)),
                          ("refused", lambda: client.act("pause", 7))):
            try:
                out[name] = ask()
            except ClientError as exc:
                out[name] = f"ClientError: {exc}"
        out["after"] = client.status()
        out["pids"] = [w["pid"] for w in out["after"]["workers"]]
        client.stop()
    finally:
        if client is not None:
            client.close()
        if "pids" not in out:  # the run must end even when the client failed
            os.kill(os.getpid(), signal.SIGTERM)


def _connect(run_dir):
    try:
        return Client.at(run_dir)
    except ClientError:
        return None


@pytest.mark.injects_bugs
def test_a_bug_in_a_handler_is_logged_with_its_traceback_and_answered_as_internal(tmp_path, monkeypatch):
    def broken_pause(self, w):
        raise KeyError("injected: pause")

    def broken_logs(self, req):
        raise ValueError("injected: logs")  # a ValueError from a bug is no refusal

    monkeypatch.setattr(Commands, "_pause", broken_pause)
    monkeypatch.setattr(Commands, "_logs", broken_logs)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    run = Run(Options(script=str(FAULTS / "steady.py"), args=[], nprocs=1, run_dir=tmp_path / "run",
                      cwd=str(tmp_path)), settings=Settings(strict_states=True))
    out: dict = {}
    client = threading.Thread(target=drive, args=(run.run_dir, out), name="test-client")
    try:
        run.setup()
        client.start()
        assert run.serve() == 1  # stopped
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        client.join(60)
    assert_gone(out.get("pids", []))
    internal = "ClientError: internal error: {} (see supervisor.log)"
    assert out["pause"] == internal.format("KeyError: 'injected: pause'"), out
    assert out["logs"] == internal.format("ValueError: injected: logs"), out
    assert out["refused"] == "ClientError: no rank 7 in this run (ranks: 0-0)", out  # as before
    assert out["after"]["workers"][0]["state"] == "running"  # the run went on
    log = (run.run_dir / errors.FILE_NAME).read_text()
    assert "] control command 'pause': KeyError: 'injected: pause'" in log  # on the main thread
    assert "ERROR [mpwatch-control-peer] control command 'logs': ValueError: injected: logs" in log
    assert log.count("Traceback (most recent call last):") == 2, log
    assert 'raise KeyError("injected: pause")' in log and 'raise ValueError("injected: logs")' in log
    assert "no rank 7" not in log  # a refusal is no bug
    assert f"supervisor pid {os.getpid()}" in log and "ended with exit code 1" in log
    found = internal_errors(tmp_path)  # what the autouse check finds unless a test says injects_bugs
    assert any("control command 'logs': ValueError: injected: logs" in f for f in found), found


@pytest.mark.injects_bugs
def test_the_same_bug_again_and_again_is_counted_not_written_in_full(tmp_path):
    handler = errors.attach(RunStore(tmp_path, Settings()))
    try:
        for _ in range(50):
            try:
                {}["x"]
            except KeyError as exc:
                assert errors.bug("a poller", exc) == "internal error: KeyError: 'x' (see supervisor.log)"
    finally:
        errors.detach(handler)
    log = (tmp_path / errors.FILE_NAME).read_text()
    assert log.count("Traceback") == errors.REPEATS
    assert "a poller: KeyError again (4 times; traceback above)" in log
    assert oct((tmp_path / errors.FILE_NAME).stat().st_mode & 0o777) == oct(0o600)


@pytest.mark.injects_bugs
def test_a_bugs_line_for_the_client_is_one_line_of_bounded_length(tmp_path):
    """An exception's text may hold what a worker said (megabytes, newlines): the client's line is
    one, cut at BUG_LINE_MAX; supervisor.log keeps it whole."""
    handler = errors.attach(RunStore(tmp_path, Settings()))
    try:
        line = errors.bug("a poller", ValueError("x" * 100_000 + "\nsecond line"))
    finally:
        errors.detach(handler)
    assert "\n" not in line and line.startswith("internal error: ValueError: xxx")
    assert line.endswith("… (see supervisor.log)")
    assert len(line) == len("internal error:  (see supervisor.log)") + errors.BUG_LINE_MAX
    assert "x" * 100_000 in (tmp_path / errors.FILE_NAME).read_text()


def test_a_planted_symlink_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / errors.FILE_NAME).symlink_to(target)
    assert errors.attach(RunStore(tmp_path, Settings())) is None
    assert target.read_text() == ""


def log_lines(run_dir) -> list[str]:
    return (run_dir / errors.FILE_NAME).read_text().splitlines()


def test_a_headless_run_has_its_supervisor_log(headless):
    run = headless(FIXTURES / "reporter.py", "3", n=1)
    assert run.wait_exit() == 0
    lines = log_lines(run.run_dir)
    assert " INFO [MainThread] run " in lines[0] and f"supervisor pid {run.proc.pid}, 1 worker(s)" in lines[0]
    assert lines[-1].endswith("ended with exit code 0") and not any(" ERROR [" in ln for ln in lines)


def test_the_tuis_launch_and_the_logger_share_supervisor_log(tmp_path):
    """cli.tui_launch sends the supervisor's output to supervisor.log; its logger appends there too."""
    ns = run_parser().parse_args(["-n", "1", str(FIXTURES / "reporter.py"), "3"])
    opts = launch.options(ns, os.environ)
    run_dir = tmp_path / "run"
    taken = claim.claim(opts.script, 1, str(tmp_path), Settings().tmpdir, run_dir, "launched")
    with writer.open_supervisor_log(taken.fd) as out:  # as launch_with_tui opens it
        sup = subprocess.run(supervisor_argv(ns, opts, taken), stdin=subprocess.DEVNULL,
                             stdout=out, stderr=out, timeout=60, cwd=tmp_path)
    os.close(taken.fd)
    assert sup.returncode == 0
    lines = log_lines(run_dir)
    assert "] run launched: supervisor pid " in lines[0] and lines[-1].endswith("ended with exit code 0")
    assert any(ln.startswith("[mpwatch ") and "run ended: exit code 0" in ln for ln in lines)  # its output
    # whole lines, none cut into another
    assert all(ln.startswith(("[mpwatch ", "20")) for ln in lines), lines
