"""End to end in tmux: `mpwatch show` on a finished run (a real crash with restarts, recorded by
the supervisor under test), stepping through it with the cursor keys, the events screen, and
`q`; then `mpwatch attach` on the same finished run opening the same replay instead of
refusing, and on a run cut short by a SIGKILLed supervisor, with its note."""
from __future__ import annotations

import shutil

import pytest

from tests.e2e.test_tmux import BIN, Tmux

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path, (100, 30))
    t.start()
    yield t
    t.kill()


def test_show_a_finished_run_and_step_through_it(tmux, crashed):
    tmux.type(f"{BIN} show {crashed.dir}; echo SHOW-EXIT=$?")
    tmux.wait_screen(lambda s: "replaying run" in s and "the end (" in s and "[finished]" in s
                     and s.count("✗ failed") >= 2 and "restarts 2" in s, "the replay at the run's end, both failed")
    tmux.key("[")  # the last failure, stall, restart or alert
    s = tmux.wait_screen(lambda s: "event " in s and "/" in s and "[running]" in s, "the cursor on a marked moment")
    tmux.key("Home")
    s = tmux.wait_screen(lambda s: "+0.0s event 1/" in s and "run started" in s, "the run's start")
    tmux.key("]")
    # the failed rank waits for its restart, as live; one screen, not the strip of one frame and the
    # table of the frame before (a capture between two repaints, seen under load). Which rank failed
    # first is the recorded run's race, and the cursor is on rank 0 after Home (no rows then): the
    # header's count says it, whichever rank it is.
    tmux.wait_screen(lambda s: "failed: exit 1: ZeroDivisionError" in s and "↻ 1 restarting" in s
                     and "✗ 0 failed" in s, "the first failure, with its cause, and the rank restarting")
    tmux.key("e")
    tmux.wait_screen(lambda s: "events of run" in s and "run started" in s and "rank 0 started (pid" in s,
                     "every event of the run")
    tmux.key("Escape")
    tmux.wait_screen(lambda s: "events of run" not in s and "RANK" in s, "the main screen again")
    tmux.key("End")
    tmux.wait_screen(lambda s: "the end (" in s, "the end again")
    tmux.key("q")
    tmux.wait_screen(lambda s: "SHOW-EXIT=0" in s, "mpwatch show to leave")


def test_attach_on_an_ended_run_opens_the_replay(tmux, crashed, killed):
    tmux.type(f"{BIN} attach {crashed.dir}; echo ATTACH-EXIT=$?")
    tmux.wait_screen(lambda s: "replaying run" in s and "the end (" in s, "the replay of the finished run")
    tmux.key("q")
    tmux.wait_screen(lambda s: "ATTACH-EXIT=0" in s, "attach to leave")
    tmux.type("clear")
    tmux.type(f"{BIN} attach {killed.dir}; echo ATTACH2-EXIT=$?")
    tmux.wait_screen(lambda s: "replaying run" in s and "final.json is missing" in s,
                     "the replay of the run cut short, with its note")
    tmux.key("q")
    tmux.wait_screen(lambda s: "ATTACH2-EXIT=0" in s, "attach to leave")
