"""`mpwatch ctl logs`: a rank's log from the run directory, of a finished run too; --follow
prints what is appended until the run ends, and ends quietly on Ctrl-C."""
from __future__ import annotations

import re
import select
import signal
import subprocess

import pytest

from tests.helpers import FIXTURES, MPWATCH, mpwatch, one_line_error, wait_for

pytestmark = pytest.mark.timeout(200)


def test_logs_of_a_finished_run(crashed):
    out = mpwatch("ctl", "--run", crashed.dir, "logs", "0")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines() == ["about to divide", "", "--- mpwatch: rank 0 restarted at "
                                       + out.stdout.split("restarted at ")[1].split()[0] + " ---", "about to divide"]
    err = mpwatch("ctl", "--run", crashed.dir, "logs", "1", "--stderr", "--lines", "1")
    assert err.stdout == "ZeroDivisionError: division by zero\n"
    assert mpwatch("ctl", "--run", crashed.dir, "logs", "1", "--lines", "0").stdout == ""
    one_line_error(mpwatch("ctl", "--run", crashed.dir, "logs", "2"), f"no rank 2 in run {crashed.run_id}")
    one_line_error(mpwatch("ctl", "--run", crashed.dir, "logs", "all"), "logs are read one rank at a time")
    one_line_error(mpwatch("ctl", "--run", crashed.dir, "logs", "0", "--lines", "-3"), "must not be negative")


def test_follow_prints_what_is_appended_and_ends_with_the_run(headless, tmp_path):
    release = tmp_path / "release"
    run = headless(FIXTURES / "ticker.py", release, n=1)
    wait_for(lambda: "tick 5\n" in run.log(0), what="rank 0 ticking")
    follow = subprocess.Popen([*MPWATCH, "ctl", "--run", str(run.run_dir), "logs", "0", "--lines", "3", "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        tail = [follow.stdout.readline() for _ in range(3)]  # its tail printed: it follows from here on
        last = int(tail[-1].split()[1])
        wait_for(lambda: f"tick {last + 20}\n" in run.log(0), what="20 more ticks")
        release.write_text("")
        assert run.wait_exit(60) == 0
        out, err = follow.communicate(timeout=60)  # it ends by itself once the run has ended
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 0 and err == ""
    lines = "".join(tail + [out]).splitlines()
    assert lines[-1] == "last line"
    ticks = [int(m.group(1)) for ln in lines if (m := re.fullmatch(r"tick (\d+)", ln))]
    assert len(ticks) == len(lines) - 1 >= 3 + 20
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks))), "every line once, in order"
    assert lines[:-1] == run.log(0).splitlines()[-len(lines):-1]


def test_follow_ends_quietly_on_ctrl_c(headless, tmp_path):
    run = headless(FIXTURES / "ticker.py", tmp_path / "never", n=1)
    wait_for(lambda: "tick 1\n" in run.log(0), what="rank 0 ticking")
    # Ctrl-C as a terminal sends it: a suite started in the background (`cmd &` in a script)
    # ignores SIGINT, and a child would inherit that and never see it
    follow = subprocess.Popen([*MPWATCH, "ctl", "--run", str(run.run_dir), "logs", "0", "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        ready, _, _ = select.select([follow.stdout], [], [], 60)
        assert ready and follow.stdout.readline().startswith(b"tick ")
        follow.send_signal(signal.SIGINT)
        # Read on, as a terminal would: a pipe left full would hold its last flush forever.
        _, err = follow.communicate(timeout=60)
        assert follow.returncode == 130
        assert err == b""
    finally:
        if follow.poll() is None:
            follow.kill()
        follow.stdout.close()
        follow.stderr.close()
