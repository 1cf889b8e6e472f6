"""Issue 23, graceful stop: --stop-signal goes to a rank's own process first, never its process
group, so its handler saves while its DataLoader workers still run; the table says a stop signal
was sent; then everything of the rank ends. The supervisor takes a batch system's USR1 as a stop,
and a signal that cannot serve is one line and exit code 2."""
import os
import re
import signal

import pytest

from mpwatch.contract import WorkerStatus
from mpwatch.tui.render import view
from tests.helpers import FIXTURES, alive, assert_gone, mpwatch, one_line_error, wait_for


def test_the_stop_signal_reaches_the_rank_alone_and_its_children_live_through_the_save(headless, tmp_path):
    flag = tmp_path / "saved"
    run = headless(FIXTURES / "stop_handler.py", "USR2", flag, n=1, opts=["--stop-signal", "USR2", "--grace", "60"])
    run.wait_state(0, "running")
    wait_for(lambda: run.worker(0)["step"], what="a report")
    pids = run.all_pids()
    said = run.ctl("stop").stdout
    assert "SIGUSR2 sent to 1 worker(s), SIGKILL after 60s" in said
    wait_for(lambda: "SAVING" in run.log(0), what="the handler")
    assert "SAVING child_alive=True" in run.log(0)
    child = int(re.search(r"child=(\d+)", run.log(0)).group(1))
    w: WorkerStatus = run.worker(0)  # as the supervisor sends it, the table's note
    assert w["state"] == "running" and w["stop"]["signal"] == "SIGUSR2" and 0 < w["stop"]["kill_in"] <= 60
    assert view.note_text(w).startswith("SIGUSR2 sent, SIGKILL in ")
    assert alive(child), "the child got nothing while its rank saves"
    ev = run.wait_event("stop_signal")[0]
    assert ev["rank"] == 0 and ev["signal"] == "SIGUSR2" and ev["reason"] == "stop" and ev["grace"] == 60
    flag.write_text("done")
    assert run.wait_exit(timeout=60) == 1  # a stopped run
    assert "SAVED child_alive=True" in run.log(0)
    assert_gone(pids | {child})
    # issue 31: it saved and exited 0 on its stop signal: it stopped cleanly, it was not killed
    (ended,) = run.events("worker_exited")
    assert ended["state"] == "exited" and ended["cause"] == "stopped cleanly on SIGUSR2 (the run was stopped), exit 0"
    # and the run's end says it was a stop asked for, not a failure of its own (the exit code stays 1)
    (fin,) = run.events("run_finished")
    assert fin["stopped"] == "asked with ctl stop or the TUI" and fin["exit_code"] == 1
    # one story, the same words (text.run_end) in the headless line and in summary (issue 40)
    assert "run ended: stopped (asked with ctl stop or the TUI), exit code 1" in run.stderr_text
    assert "run finished" not in run.stderr_text
    text = mpwatch("summary", run.run_dir).stdout
    assert "ended: stopped (asked with ctl stop or the TUI), exit code 1" in text
    assert "exited" in text and "stopped cleanly on SIGUSR2 (the run was stopped), exit 0" in text


def test_a_batch_systems_usr1_to_mpwatch_stops_the_run_gracefully(headless, tmp_path):
    """Slurm's `--signal=B:USR1@120`, forwarded by the batch script to srun, reaches mpwatch."""
    flag = tmp_path / "saved"
    flag.write_text("at once")
    run = headless(FIXTURES / "stop_handler.py", "USR2", flag, n=2, opts=["--stop-signal", "USR2"])
    wait_for(lambda: all(w["step"] for w in run.status()["workers"]), what="reports")
    pids = run.all_pids()
    os.kill(run.proc.pid, signal.SIGUSR1)
    assert run.wait_exit(timeout=60) == 1
    assert run.events("stopping")[0]["why"] == "signal SIGUSR1"
    assert all("SAVED" in run.log(r) for r in (0, 1))
    assert_gone(pids)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_a_signal_the_moment_the_run_is_announced_is_a_stop_never_a_death(headless, sig):
    """control.json is written (ctl and ls find the run) before the workers start: a batch
    system's USR1 or a TERM from then on stops the run; it once killed the supervisor by the
    signal's default action, found when a loaded machine sent it in that window."""
    run = headless(FIXTURES / "forever.py", n=2, start=False)
    run.start_at_once()
    wait_for(lambda: (run.run_dir / "control.json").exists() or run.proc.poll() is not None, interval=0.001,
             what="the run announced")
    os.kill(run.proc.pid, sig)
    assert run.wait_exit(timeout=60) == 1, run.stderr_text
    assert run.events("stopping")[0]["why"] == f"signal {signal.Signals(sig).name}"
    assert f"run ended: stopped (signal {signal.Signals(sig).name}), exit code 1" in run.stderr_text
    run.assert_gone()


@pytest.mark.parametrize("sig, words", [
    ("KILL", "SIGKILL: it cannot be caught"), ("9", "SIGKILL: it cannot be caught"),
    ("USR1", "SIGUSR1: mpwatch's stack dumps use it"), ("STOP", "SIGSTOP: it cannot be caught"),
    ("BOGUS", "not a signal: 'BOGUS'"), ("", "not a signal"),
])
def test_a_stop_signal_that_cannot_serve_is_one_line(sig, words):
    one_line_error(mpwatch("--headless", "--stop-signal", sig, FIXTURES / "ticker.py"), words)


def test_metrics_addr_without_a_port_is_one_line(tmp_path):
    one_line_error(mpwatch("--headless", "--metrics-addr", "0.0.0.0", FIXTURES / "ticker.py", cwd=tmp_path),
                   "--metrics-addr goes with --metrics-port")


def test_the_tuis_supervisor_gets_the_stop_signal_and_the_metrics_flags(tmp_path):
    """`mpwatch SCRIPT` starts its supervisor as a process of its own (cli.tui_launch): the new
    flags reach it as typed, checked again there."""
    from pathlib import Path

    from mpwatch import cli
    from mpwatch.cli.launch import options
    from mpwatch.cli.tui_launch import supervisor_argv
    from mpwatch.rundir.claim import Claim
    from mpwatch.settings import Settings

    script = FIXTURES / "ticker.py"
    ns = cli.run_parser().parse_args(["--stop-signal", "usr2", "--metrics-port", "9400", "--metrics-addr", "::1",
                                      str(script)])
    opts = options(ns, {})
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        taken = Claim("RID", Path(tmp_path), fd, Settings().tmpdir)
        back = cli.run_parser().parse_args(supervisor_argv(ns, opts, taken)[3:])
        plain = cli.run_parser().parse_args([str(script)])
        again = cli.run_parser().parse_args(supervisor_argv(plain, options(plain, {}), taken)[3:])
    finally:
        os.close(fd)
    assert (back.stop_signal, back.metrics_port, back.metrics_addr) == ("SIGUSR2", 9400, "::1")
    assert (again.stop_signal, again.metrics_port, again.metrics_addr) == ("SIGTERM", None, None)
