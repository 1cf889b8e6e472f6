"""A finding read whole, once, with one set of numbers (issue 40): at 160x48 the straggler's reason
ended "its data phase wa…" and showed twice (the status line's notice with 203 ms, the alert line
with 204 ms); at 80x24 it was cut at "…against 0.4 ms on the oth…". One real 3-rank gloo run (a
Dataset 0.15 s slow on rank 2), two TUIs attached before the finding, at 80x24 and 160x48: the
finding is on screen whole (wrapped under its mark), its numbers said once and the status's own;
the notice of it says its headline only; `a` opens every alert whole."""
from __future__ import annotations

import shutil

import pytest

from tests.e2e.test_tmux import BIN, Tmux
from tests.helpers import FIXTURES, HeadlessRun, need, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]
SIZES = ((80, 24), (160, 48))


def flat(text: str) -> str:
    """Words apart by one space: a wrapped line reads as the sentence it is."""
    return " ".join(text.split())


def messages(run: HeadlessRun) -> set[str]:
    return {flat(a["message"]) for a in run.status()["alerts"] if a["kind"] == "straggler"}


def screen_and_said(t: Tmux, run: HeadlessRun, pred, what: str, said: set[str], timeout: float = 60) -> str:
    """The screen once pred holds, and into `said` every message the status had meanwhile, read at
    each look at the screen: the TUI shows the one it polled last, which may have been replaced by the
    time the screen is read (a finding's numbers move with the run)."""
    def look(screen: str) -> bool:
        said.update(messages(run))
        return pred(screen)

    screen = t.wait_screen(look, what, timeout)
    said.update(messages(run))
    return screen


def test_a_straggler_finding_is_whole_and_once_at_80x24_and_160x48(tmp_path):
    need("torch", "the straggler's run is torch's (pip install -e '.[demo]')")
    run = HeadlessRun(tmp_path, FIXTURES / "ddp_pace.py", "--slow-rank", "2", "--slow-data", "0.15", n=3)
    screens = {size: Tmux(tmp_path, size=size) for size in SIZES}
    try:
        run.start()
        for t in screens.values():  # attached before the finding: its notice is said too
            t.start()
            t.type(f"{BIN} attach {run.run_dir}")
        for t in screens.values():
            t.wait_screen(lambda s: "RANK" in s, "the TUI attached", 120)
        # the finding's numbers as the status had them from then up to each capture
        said = set(wait_for(lambda: messages(run), 240, interval=0.5, what="rank 2 named the straggler"))
        for size, t in screens.items():
            s = screen_and_said(t, run, lambda s: "(no DataLoader workers)" in s and "alert: rank 2 is the straggler" in s,
                                f"the finding whole and its notice at {size}", said)
            assert any(m in flat(s) for m in said), f"{said}\n{s}"
            assert flat(s).count("its data takes") == 1, s  # once, one set of numbers
            notice = next(ln for ln in s.splitlines() if "alert: rank 2 is the straggler" in ln)
            assert " ms" not in notice and "(whole under the table; a: every alert)" in flat(notice), notice
        t = screens[(80, 24)]
        t.key("a")
        s = screen_and_said(t, run, lambda s: "alerts: 1 standing" in s and "(no DataLoader workers)" in flat(s),
                            "the alerts screen", said)
        assert any(m in flat(s) for m in said), s
    finally:
        for t in screens.values():
            t.kill()
        run.cleanup()
