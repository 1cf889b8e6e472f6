"""`mpwatch attach` with two live runs and no RUN (issue 20, item 5), in tmux at 80x24 and
160x48: a picker lists both (id, script, start, directory), never opening one by chance;
Enter on the older one attaches to it; q in the picker leaves without attaching, and its
footer says q, as its title does."""
from __future__ import annotations

import json
import os
import shutil
import signal

import pytest

from tests.e2e.test_tmux import BIN, Tmux
from tests.helpers import FIXTURES, HeadlessRun, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_attach_asks_which_of_two_live_runs(tmp_path, size):
    runs = [HeadlessRun(tmp_path / name, FIXTURES / script, n=1, opts=["--grace", "1"])
            for name, script in (("older", "tui_worker.py"), ("newer", "forever.py"))]
    env = {"XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"]} if "XDG_RUNTIME_DIR" in os.environ else {}
    tmux = Tmux(tmp_path, size, env)
    try:
        for run in runs:
            run.tmp.mkdir()
            run.start()
            wait_for(lambda run=run: run.worker(0)["state"] == "running", 60, what="a running worker")
        old_id, new_id = (json.loads((r.run_dir / "run.json").read_text())["run_id"] for r in runs)
        tmux.start()
        tmux.type(f"{BIN} attach; echo ATTACH-EXIT=$?")
        s = tmux.wait_screen(lambda s: "2 live runs: which one to attach to?" in s and old_id in s and new_id in s
                             and " Leave" in s, "the picker with both runs, and its footer")
        assert "forever.py" in s and "tui_worker.py" in s and "started " in s
        assert "RANK" not in s  # no run opened by chance
        # its footer says the key its title says (issue 31: the footer said "esc Leave")
        assert "q or Esc leaves" in s and "q Leave" in s and "esc Leave" not in s, s
        tmux.key("q")
        tmux.wait_screen(lambda s: "no run chosen; nothing attached" in s and "ATTACH-EXIT=0" in s, "leaving the picker")
        tmux.type("clear")
        tmux.type(f"{BIN} attach; echo ATTACH2-EXIT=$?")
        tmux.wait_screen(lambda s: "which one to attach to?" in s, "the picker again")
        tmux.key("Down")  # the older run, listed second
        tmux.key("Enter")
        s = tmux.wait_screen(lambda s: f"mpwatch {old_id}" in s and "RANK" in s and "1 running" in s,
                             "the older run attached")
        assert new_id not in s
        tmux.key("q")
        tmux.wait_screen(lambda s: "Detach" in s, "the quit dialog")
        tmux.key("d")
        tmux.wait_screen(lambda s: "ATTACH2-EXIT=0" in s, "attach to leave")
        assert all(run.proc.poll() is None for run in runs)  # both runs go on
    finally:
        tmux.kill()
        for run in runs:
            if run.proc is not None and run.proc.poll() is None:
                run.proc.send_signal(signal.SIGTERM)
            run.cleanup()
