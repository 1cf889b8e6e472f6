"""The opted-out runs tests/auto shares: tests/fixtures/auto_loop.py under a real `mpwatch
--headless`, once with `--no-auto` and once with MPWATCH_AUTO=0, each to its end, started once a
session. test_runs.py reads them as a user's opt-out (the script is left without steps), and
test_worker_side.py reads their losses as the loop's own without the hooks (bit-identical with
them): both made these runs for themselves before. And the forkserver test_worker_side's loops
are forked from (`torch_forks`). Their tests share the xdist group `auto-loops` (tests/conftest.py)."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

import pytest

from mpwatch.supervisor import spawn
from mpwatch.supervisor.preload.forkserver import Forkserver
from tests.helpers import FIXTURES, ROOT, HeadlessRun, internal_errors, need, wait_for

LOOP = FIXTURES / "auto_loop.py"
# the shapes the hooks must leave bit-identical: accumulation, two optimizers, a checkpoint's backward
LOOP_ARGS = ("--steps", 25, "--accum", 2, "--optimizers", 2, "--checkpoint", "--sleep", 0)
OPT_OUTS = ("--no-auto", "MPWATCH_AUTO=0")


class OptedOut:
    """One opted-out run, ended: what the script wrote (tests/fixtures/auto_loop.py's --out),
    its final.json, its report events and its supervisor's exit code."""

    def __init__(self, run: HeadlessRun, out: dict, code: int) -> None:
        self.out = out
        self.code = code
        self.final = json.loads((run.run_dir / "final.json").read_text())
        self.reports = run.events("report")
        self.bugs = internal_errors(run.tmp)  # the autouse check sees only a test's own tmp_path


@pytest.fixture(scope="session")
def opted_out(tmp_path_factory) -> dict[str, OptedOut]:
    """{how: OptedOut} for each way to opt out, both runs side by side."""
    need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
    runs = {}
    for how in OPT_OUTS:
        folder = tmp_path_factory.mktemp("opted-out")
        env = dict(os.environ, MPWATCH_AUTO="0") if how.startswith("MPWATCH") else None
        runs[how] = HeadlessRun(folder, LOOP, *LOOP_ARGS, "--out", folder / "out-{rank}.json", n=1,
                                opts=[how] if how.startswith("--") else (), env=env).start()
    try:
        return {how: OptedOut(run, json.loads((run.tmp / "out-0.json").read_text()) if run.wait_exit(180) == 0
                              else {}, run.proc.returncode) for how, run in runs.items()}
    finally:
        for run in runs.values():
            run.cleanup()


@pytest.fixture(scope="session")
def torch_forks() -> Iterator[Forkserver]:
    """mpwatch's own forkserver (supervisor.preload), as a supervisor starts it for a torch script
    that builds an optimizer: torch and what follows it imported once, and each of
    test_worker_side's loops forked from it, as the supervisor forks such a script's workers
    (each loop started by exec imported them for itself: 3.3 CPU-s a loop)."""
    need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
    env = spawn.forkserver_env({**os.environ, "PYTHONPATH": str(ROOT)}, "tests-auto-loops")
    server = Forkserver(["torch"], env, str(ROOT), [sys.executable, str(LOOP)], follow=True)
    server.start()
    try:
        wait_for(lambda: server.pump() or server.state != "loading", 300, interval=0.1,
                 what="the forkserver's imports")
        assert server.state == "ready", server.why
        yield server
    finally:
        server.close()
