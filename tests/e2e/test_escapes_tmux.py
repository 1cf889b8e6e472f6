"""Issue 39, item 2 and its one sanitiser at the terminal: a run full of escape sequences (its
script's and run directory's names, its phases, metrics, a tunable's value, its stdout and stderr
lines, a torch region in a profile's top operators, its cause of failure; and, replayed, crafted
events.jsonl fields) watched in tmux, live and in `mpwatch show`. The test reads the RAW BYTES the
terminal received (tmux pipe-pane): the TUI's own styling is there (CSI cursor moves and colours,
its pointer's OSC 22), but none of the run's sequences: each carries a marker (MPW...), and no
escape sequence, C1 control or bell in the stream carries one; the window title never changes; and
the markers do reach the screen, shown as text ('?' for each control character)."""
from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from tests.e2e.test_tmux import BIN, Tmux, run_pids
from tests.helpers import FIXTURES, kill_all, mpwatch, need, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

H = "\x1b]0;MPWTITLE\x07\x1b[2JMPWCLEAR\x9bMPWC1\x1b[6nMPWDSR\x07MPWBEL"  # the fixture's HOSTILE
SCRIPT = "esc\x1b]0;MPWSCRIPT\x07.py"
RUN = "run\x1b]0;MPWRUNDIR\x07x"
# How bash names them on the command line: the terminal sees no escape typing them.
SH_SCRIPT, SH_RUN = "\"$(printf 'esc\\033]0;MPWSCRIPT\\007.py')\"", "\"$(printf 'run\\033]0;MPWRUNDIR\\007x')\""
CSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]")
OSC = re.compile(rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
C1 = re.compile("[\x80-\x9f]")  # a C1 control, in the text the bytes decode to


def crafted_events(t0: float) -> list[dict]:
    """Events a run's file could hold, every text field hostile (a replay reads them)."""
    return [{"ts": t0, "event": "alert", "rank": 0, "kind": H, "key": H, "message": H},
            {"ts": t0 + 0.1, "event": "tunable_declared", "rank": 0, "tunable": H, "type": "str", "default": H},
            {"ts": t0 + 0.2, "event": H, "rank": 0, "message": H},
            {"ts": t0 + 0.3, "event": "stalled", "rank": 0, "step": 1, "where": H, "collective": H}]


def check_raw(raw: bytes) -> None:
    """No escape sequence, C1 control or bell of the run's in the bytes the terminal received."""
    for seq in CSI.findall(raw) + OSC.findall(raw):
        assert b"MPW" not in seq, seq
    titles = [s for s in OSC.findall(raw) if re.match(rb"\x1b\]([012]|52);", s)]
    assert not titles, titles  # nothing retitles the window (nor writes the clipboard)
    c1 = C1.findall(raw.decode("utf-8", "replace"))
    assert not c1, f"C1 controls reached the terminal: {c1}"
    assert raw.count(b"\x07") == sum(s.endswith(b"\x07") for s in OSC.findall(raw)), "a bell of the run's"
    assert b"\x1b[6n" not in raw, "a device status report: the terminal would answer on the TUI's input"
    for marker in (b"MPWTITLE", b"MPWCLEAR", b"MPWC1", b"MPWDSR", b"MPWBEL"):
        for m in re.finditer(marker, raw):
            before = raw[max(0, m.start() - 5):m.start()]
            assert b"\x1b" not in before and b"\x07" not in before, raw[max(0, m.start() - 20):m.end()]
    # and they did reach the screen, as text
    for shown in (b"?]0;MPWTITLE??[2JMPWCLEAR?MPWC1?[6nMPWDSR?MPWBEL", b"esc?]0;MPWSCRIPT?.py",
                  b"run?]0;MPWRUNDIR?x"):
        assert shown in raw, shown


def test_a_run_full_of_escapes_reaches_the_terminal_as_text_live_and_replayed(tmp_path):
    need("torch", "the fixture names a torch region (a profile's operator)")
    (tmp_path / SCRIPT).write_text((FIXTURES / "escape_names.py").read_text())
    run_dir = tmp_path / RUN
    raw_file = tmp_path / "raw.bin"
    tmux = Tmux(tmp_path, size=(160, 48))
    tmux.start()
    try:
        title = tmux("display", "-p", "-t", "e2e", "#{pane_title}")
        tmux("pipe-pane", "-o", "-t", "e2e", f"cat >> {raw_file}")
        live(tmux, run_dir)
        replayed(tmux, run_dir)
        tmux("pipe-pane", "-t", "e2e")  # closes the pipe: every byte is in the file
        assert tmux("display", "-p", "-t", "e2e", "#{pane_title}") == title
        check_raw(wait_for(lambda: raw_file.read_bytes() or None, 10, what="the captured bytes"))
    finally:
        tmux.kill()
        kill_all(run_pids(run_dir))


def live(tmux: Tmux, run_dir) -> None:
    tmux.type(f"{BIN} -n 1 --grace 2 --run-dir {SH_RUN} {SH_SCRIPT}; echo MPWATCH-EXIT=$?")
    tmux.wait_screen(lambda s: re.search(r"● running +\d{2,}", s) is not None, "the rank stepping", 240)
    said = mpwatch("ctl", "--run", run_dir, "profile", "0", "--steps", "2").stdout
    assert "asked of rank 0" in said, said
    wait_for(lambda: "written on rank 0" in mpwatch("ctl", "--run", run_dir, "status").stdout, 120,
             interval=0.5, what="the profile written")
    tmux.key("Enter")  # the detail view: the pace's phases, the top operators, stdout and stderr
    tmux.wait_screen(lambda s: "2  ?]0;MPWTITLE??[2JMPWCLEAR?MPWC1?[6nMPWDSR?MPWBEL" in s and "stdout ?]0;MPWTITLE" in s
                     and "stderr ?]0;MPWTITLE" in s and "pace: " in s, "the detail view of the hostile names")
    for key, sign in (("l", "stdout ?]0;MPWTITLE"), ("t", "'\\x1b]0;M"), ("e", "declared tunable tag")):
        tmux.key("Escape")
        tmux.wait_screen(lambda s: "RANK" in s, "the main screen")
        tmux.key(key)
        tmux.wait_screen(lambda s, sign=sign: sign in s, f"the screen of {key}")
    tmux.key("Escape")
    assert mpwatch("ctl", "--run", run_dir, "set", "crash", "1").returncode == 0
    tmux.wait_screen(lambda s: "run ended: exit code 1: rank 0: RuntimeError: crashed ?]0;MPWTITLE" in s, "the run's end and cause", 120)
    tmux.key("q")
    tmux.wait_screen(lambda s: "MPWATCH-EXIT=" in s, "the TUI to leave")


def replayed(tmux: Tmux, run_dir) -> None:
    events = run_dir / "events.jsonl"
    t0 = json.loads(events.read_text().splitlines()[0])["ts"] + 0.5
    with open(events, "a") as f:
        f.writelines(json.dumps(e) + "\n" for e in crafted_events(t0))
    tmux.type(f"clear; {BIN} show {SH_RUN}; echo SHOW-EXIT=$?")
    tmux.wait_screen(lambda s: "replaying run" in s, "the replay", 120)
    tmux.key("Home")
    tmux.wait_screen(lambda s: "event 1/" in s, "the run's start")
    for _ in range(6):  # through the crafted events, each said on the strip
        tmux.key(".")
        time.sleep(0.3)
    tmux.key("e")
    tmux.wait_screen(lambda s: "events of run" in s and "MPWTITLE" in s, "the events, crafted ones among them")
    tmux.key("Escape")
    tmux.wait_screen(lambda s: "RANK" in s and "events of run" not in s, "the main screen again")
    tmux.key("End")
    tmux.wait_screen(lambda s: "the end (" in s, "the end of the replay")
    tmux.key("Enter")
    tmux.wait_screen(lambda s: "2  ?]0;MPWTITLE??[2JMPWCLEAR?MPWC1?[6nMPWDSR?MPWBEL" in s,
                     "the replayed detail: its top operators")
    tmux.key("Escape")
    tmux.wait_screen(lambda s: "RANK" in s, "the main screen again")
    tmux.key("q")
    tmux.wait_screen(lambda s: "SHOW-EXIT=0" in s, "the replay to leave")
