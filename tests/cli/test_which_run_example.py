"""The refusal among several live runs shows the command as typed with --run, on a run where it
works (issue 40: `ctl set lr 0.5` named the newest run as its example, one that declares no such
tunable). Real supervisors: an older run that declares `lr`, a newer one that declares none."""
from __future__ import annotations

import json

from tests.helpers import FIXTURES, mpwatch, wait_for


def run_id(run) -> str:
    return json.loads((run.run_dir / "run.json").read_text())["run_id"]


def test_the_refusals_example_is_the_command_on_a_run_where_it_works(headless):
    older = headless(FIXTURES / "control_loop.py", "0", "0.05", n=1)
    older.wait_declared("lr")
    newer = headless(FIXTURES / "forever.py", n=1)
    wait_for(lambda: newer.worker(0)["state"] == "running", 60, what="the newer run's rank")
    old, new = run_id(older), run_id(newer)
    said = mpwatch("ctl", "set", "lr", "0.5")
    assert said.returncode == 2
    head = said.stderr.splitlines()[0]
    assert head == f"mpwatch: error: 2 live runs: say which one to set with --run RUN (e.g. mpwatch ctl --run {old} " \
                   "set lr 0.5)", head
    none = mpwatch("ctl", "set", "nosuch", "1").stderr.splitlines()[0]
    assert none.endswith("with --run RUN (no live run here declares a tunable nosuch)"), none
    pause = mpwatch("ctl", "pause", "0").stderr.splitlines()[0]
    assert pause.endswith(f"(e.g. mpwatch ctl --run {new} pause 0)"), pause  # the newest: any run pauses
    assert all(w["state"] == "running" for run in (older, newer) for w in run.status()["workers"])
