"""Issue 41 end to end in tmux: `mpwatch -n 3` of an unmodified gloo DDP loop whose Dataset becomes
3x slower on every rank (its ranks held above the other jobs of this machine: tests.helpers.TakenMachine),
the TUI in a pane of 80x24, then of 160x48 (the same TUI, its terminal resized): the slowdown finding on screen where the findings show, with its numbers as `ctl status
--json` has them, the phase that grew at 160 columns; then the run stopped and nothing left."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.e2e.test_tmux import BIN, Tmux, run_pids
from tests.helpers import FIXTURES, TakenMachine, assert_gone, mpwatch, need, wait_for

need("torch", "the slowdown's run is torch's (pip install -e '.[demo]')")
pytestmark = [pytest.mark.e2e, pytest.mark.torch, pytest.mark.timeout(600),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

HEAD = re.compile(r"the run slowed to (\d+\.\d) steps/s from (\d+\.\d) \((0\.\d\d)x\)")


def joined(screen: str) -> str:
    """The screen's text with its wrapped lines joined (a finding is wrapped under its mark)."""
    return " ".join(ln.strip() for ln in screen.splitlines())


def finding(run_dir) -> dict | None:
    res = mpwatch("ctl", "--run", run_dir, "status", "--json")
    if res.returncode != 0:
        return None
    return next((a for a in json.loads(res.stdout)["alerts"] if a["kind"] == "slowdown"), None)


def test_the_slowdown_on_screen_at_80x24_and_160x48(tmp_path):
    run_dir = tmp_path / "run"
    tmux = Tmux(tmp_path, (80, 24))
    tmux.start()
    try:
        tmux.type(f"{BIN} -n 3 --grace 2 --run-dir {run_dir} {FIXTURES / 'ddp_pace.py'} --data 0.06 "
                  "--data-slower-after 1000; echo MPWATCH-EXIT=$?")
        def stepping() -> list[int] | None:
            res = mpwatch("ctl", "--run", run_dir, "status", "--json")
            ws = json.loads(res.stdout)["workers"] if res.returncode == 0 else []
            return [w["pid"] for w in ws] if len(ws) == 3 and all(w["step"] for w in ws) else None
        TakenMachine().hold(wait_for(stepping, 150, interval=1, what="every rank stepping"))
        a = wait_for(lambda: finding(run_dir), 480, interval=2, what="the slowdown finding")
        small = tmux.wait_screen(lambda s: HEAD.search(s) is not None, "the finding at 80x24", timeout=30)
        line = next(ln for ln in small.splitlines() if HEAD.search(ln))
        assert len(line) <= 80 and line.lstrip().startswith(("▲", "!")), line
        ratio = float(HEAD.search(line).group(3))
        assert abs(ratio - a["slowdown"]["ratio"]) < 0.15, (line, a["slowdown"])
        assert "RANK" in small and "3 running" in small  # the table and its header stay on screen
        assert re.search(r"since \d\d:\d\d:\d\d: every rank's data takes \d\.\dx its own best", joined(small))

        tmux("resize-window", "-t", "e2e", "-x", "160", "-y", "48")
        big = tmux.wait_screen(lambda s: any(HEAD.search(ln) and len(ln.rstrip()) > 80 for ln in s.splitlines()),
                               "the finding at 160x48", timeout=30)
        line = next(ln for ln in big.splitlines() if HEAD.search(ln))
        assert len(line) <= 160 and re.search(r"every rank's data takes \d\.\dx its own best", line), line
        pids = run_pids(run_dir)
        tmux.key("q")
        tmux.wait_screen(lambda s: "Stop the run" in s, "the quit dialog")
        tmux.key("s")
        tmux.wait_screen(lambda s: "MPWATCH-EXIT=" in s, "mpwatch to exit after stopping", timeout=90)
        assert_gone(pids | run_pids(run_dir))
    finally:
        tmux.kill()
