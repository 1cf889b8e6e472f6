"""A user's own sitecustomize.py beside mpwatch's start-up hook (issue 30, item 9): a worker
behaves as the same script does under plain Python. The `sitecustomize` module is the user's
(its attributes are there), and a user's sitecustomize that fails says so on stderr exactly as
Python says it without mpwatch ("Error in sitecustomize; ..."), never silently; mpwatch's hook
still works in every case (its stack dump on SIGUSR1 is armed, the worker reports)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(180)

SCRIPT = """
import os, signal, sys, time
import mpwatch
print("MARK", getattr(sys.modules.get("sitecustomize"), "MARK", None), flush=True)
for step in range(3):
    mpwatch.report(step=step, loss=1.0)
stacks = os.environ.get("MPWATCH_STACK_FILE")
if stacks:  # under mpwatch: its hook armed the stack dumps on SIGUSR1 before the user's ran
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while 'File "' not in open(stacks).read() and time.monotonic() < deadline:
        time.sleep(0.05)
    print("DUMPED", 'File "' in open(stacks).read(), flush=True)
"""


def _plain(script, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("user_hook, expect", [
    ("MARK = 42\n", "MARK 42"),
    ("import no_such_module_mpwatch_test\nMARK = 1\n", "MARK None"),
    ("raise RuntimeError('boom in the user hook')\n", "MARK None"),
])
def test_a_users_sitecustomize_runs_as_without_mpwatch(headless, tmp_path, user_hook, expect):
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(user_hook)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(theirs), os.environ.get("PYTHONPATH", "")]))
    plain = _plain(script, env)
    assert expect in plain.stdout, plain
    run = headless(script, n=1, env=env)
    assert run.wait_exit(60) == 0, run.stderr_text
    assert expect in run.log(0) and "DUMPED True" in run.log(0), run.log(0)
    said = [ln for ln in plain.stderr.splitlines() if ln.strip()]
    assert [ln for ln in run.log(0, "stderr").splitlines() if ln.strip()] == said
    assert run.events("worker_exited")[0]["exit_code"] == 0
    assert len([e for e in run.events("report")]) >= 1  # mpwatch's side worked
