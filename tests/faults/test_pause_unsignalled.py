"""`pause` marks a rank paused only when its SIGSTOP reached it (issue 39, item 11): a rank whose
process has ended, its end not yet recorded (the reaper waits for its channel to drain, as when a
child holds the channel's socket open), is refused with why, and stays as it was. Before, it was
marked paused. The supervisor runs in this process and its loop is driven by hand, so that the
window stays open (DRAIN_S made long, the channel held open); the worker is a real process."""
from __future__ import annotations

import os
import signal

import pytest

from mpwatch.contract import State
from mpwatch.settings import Settings
from mpwatch.supervisor.core import Options, Run
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.workers import reaping
from mpwatch.supervisor.workers.ledger import ReportLedger
from tests.faults.conftest import FAULTS
from tests.helpers import assert_gone, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("cmd", ["pause", "resume"])
def test_a_signal_that_fails_marks_nothing_and_says_why(tmp_path, monkeypatch, cmd):
    monkeypatch.setattr(reaping, "DRAIN_S", 600.0)
    monkeypatch.setattr(ReportLedger, "on_close", lambda self, peer: None)  # its channel stays open
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                                             signal.SIGUSR2)}
    run = Run(Options(script=str(FAULTS / "quick_exit.py"), args=[], nprocs=1, run_dir=tmp_path / "run",
                      cwd=str(tmp_path)), settings=Settings(strict_states=True))
    try:
        run.setup()
        w = wait_for(lambda: (run.resizing.advance(), run.workers.get(0))[1], what="rank 0 started")
        pid = w.pid
        wait_for(lambda: w.attempt.chan_open, what="its channel")
        if cmd == "resume":  # a rank paused while its process lived
            assert run.commands._pause(w)[0] and w.state is State.PAUSED
            os.kill(pid, signal.SIGCONT)  # it runs to its end behind mpwatch's back
        wait_for(lambda: (run.reaper.poll(), w.attempt.exit_seen is not None)[1], what="its process's end")
        assert w.alive and w.state in (State.RUNNING, State.PAUSED)  # its end not recorded yet
        before = w.state
        with pytest.raises(CommandError) as err:
            run.commands._ranks(cmd, 0)  # as the main thread runs a command (dispatch hands it there)
        assert str(err.value) == (f"could not {cmd} rank 0: its process group {pid} could not be signalled "
                                  "(its process has ended, or is not ours)")
        assert w.state is before
    finally:
        run.stop("the test's end")
        run.close()
        for s, h in saved.items():
            signal.signal(s, h)
    assert_gone([pid])
