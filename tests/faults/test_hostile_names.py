"""Names and values that look like something else (issue 30, item 12): a newline in the script's
name never splits a headless line (the "run started" line stays one line, the newline shown as
'?'), and `ctl set NAME VALUE` takes a negative number as the value it is (-1e-3, -5, -inf: the
last refused by the tunable's own rule, in one line), not as an unknown option."""
from __future__ import annotations

import pytest

from tests.helpers import FIXTURES, one_line_error, wait_for

pytestmark = pytest.mark.timeout(180)
LOOP = FIXTURES / "control_loop.py"


def test_a_newline_in_the_scripts_name_never_splits_a_headless_line(headless, tmp_path):
    script = tmp_path / "two\nlines.py"
    script.write_text("print('hello')\n")
    run = headless(script, n=1)
    assert run.wait_exit(60) == 0
    lines = run.stderr_text.splitlines()
    assert lines and all(ln.startswith(("[mpwatch ", "mpwatch: ")) for ln in lines), lines
    started = [ln for ln in lines if "run started" in ln]
    assert len(started) == 1 and "two?lines.py; files in " in started[0], started


def test_ctl_set_takes_a_negative_number_as_its_value(headless):
    run = headless(LOOP, "0", "0.05", n=2)
    run.wait_event("tunable_declared", count=4)
    run.wait_declared("lr")
    wait_for(lambda: all(w["step"] for w in run.status()["workers"]), what="every rank's steps")
    said = run.ctl("set", "lr", "-1e-3").stdout
    assert said.startswith("lr = -0.001 from step ") and said.rstrip().endswith("on ranks 0-1 (now 0.1)"), said
    said = run.ctl("set", "batch", "-5").stdout
    assert said.startswith("batch = -5 from step ") and said.rstrip().endswith("on ranks 0-1 (now 32)"), said
    refused = run.ctl("set", "lr", "-inf", check=False)
    one_line_error(refused, "lr is a float: expected a finite float, got '-inf'")
    applied = run.wait_event("tunable_applied", count=4, timeout=60)
    assert sorted((e["tunable"], e["value"]) for e in applied) == [("batch", -5)] * 2 + [("lr", -0.001)] * 2
