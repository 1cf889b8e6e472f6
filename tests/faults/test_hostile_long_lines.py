"""A log line past 64 KiB (issue 30, item 4): a progress bar redrawn with \\r and never ended by a
newline, 700 KB of it, is the last thing a crashing rank writes on stderr, and a 100 KB line
without newline the last on stdout. The line is cut, never dropped, and neither are the lines
before it: `ctl logs` shows them and the cut line (the bar's last redraw; the long line's start,
marked "…"), and the crash's stderr tail (what its cause is read from) holds them too."""
from __future__ import annotations

import pytest

from tests.helpers import mpwatch

pytestmark = pytest.mark.timeout(180)
REDRAWS = 20000
BAR = "[" + "#" * 20 + "]"
SCRIPT = f"""
import sys
sys.stdout.write("out 1\\nout 2\\n" + "x" * 100_000)
sys.stdout.flush()
sys.stderr.write("line A\\nline B\\n")
for i in range({REDRAWS}):
    sys.stderr.write(f"\\r{{i + 1:5d}}/{REDRAWS} {BAR}")
sys.stderr.flush()
sys.exit(3)
"""


def test_a_line_past_64k_is_cut_and_the_lines_before_it_are_kept(headless, tmp_path):
    script = tmp_path / "bar.py"
    script.write_text(SCRIPT)
    run = headless(script, n=1)
    assert run.wait_exit(60) == 1
    assert len(run.log(0, "stderr")) > 64 * 1024 * 10  # the bar's bytes are all in the log
    shown_bar = f"{REDRAWS}/{REDRAWS} {BAR}"
    exited = run.events("worker_exited")[0]
    assert exited["exit_code"] == 3 and exited["stderr_tail"][-3:] == ["line A", "line B", shown_bar], exited
    res = mpwatch("ctl", "--run", run.run_dir, "logs", "0", "--stderr")
    assert res.returncode == 0 and res.stdout.splitlines() == ["line A", "line B", shown_bar], res
    out = mpwatch("ctl", "--run", run.run_dir, "logs", "0").stdout.splitlines()
    assert out[:2] == ["out 1", "out 2"] and len(out) == 3, out
    assert out[2].startswith("x" * 100) and out[2].endswith("…"), out[2][-20:]
