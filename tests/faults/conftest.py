"""Helpers shared by the fault-injection suite (issue 8)."""
import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, helpers_of, wait_for  # noqa: F401 - helpers_of: the tests import it from here
from tests.remote.conftest import sshd  # noqa: F401 - the test's own sshd (test_hostile_remote.py)

FAULTS = FIXTURES / "faults"


def pid_lines(run, rank: int, n: int) -> list[int]:
    """Wait for n 'PID x' lines in a rank's stdout (pids of processes the fixture made)."""
    path = run.run_dir / f"rank-{rank}" / "stdout.log"

    def found():
        try:
            pids = [int(x) for x in re.findall(r"^PID (\d+)$", path.read_text(errors="replace"), re.M)]
        except FileNotFoundError:
            return None
        return pids if len(pids) >= n else None
    return wait_for(found, what=f"{n} PID lines from rank {rank}")


def reporting(run, n: int, min_step: int = 2):
    """Status once n workers are running and have reported at least min_step, else None."""
    st = run.status()
    ws = st["workers"]
    if len(ws) == n and all(w["state"] == "running" and (w["step"] or 0) >= min_step for w in ws):
        return st
    return None


def final(run) -> dict:
    return json.loads((run.run_dir / "final.json").read_text())


def control(run) -> dict:
    return json.loads((run.run_dir / "control.json").read_text())


def printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n" for c in text)


requires_root = pytest.mark.root("becoming uid 65534")  # tests/privilege.py


@pytest.fixture
def faults():
    return Path(FAULTS)


NOBODY = 65534


def as_user(fn, uid: int = NOBODY, env: dict | None = None):
    """Run fn() in a forked child that has dropped to uid (no groups, no capabilities) and
    return what it returns (JSON-able), or raise with the child's error. Everything fn needs
    must be imported already: the unprivileged child may not be able to read the stdlib."""
    import traceback

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.environ.update(env or {})
            out = {"ok": fn()}
        except BaseException:  # noqa: BLE001 - report everything to the parent
            out = {"error": traceback.format_exc()}
            code = 1
        try:
            with os.fdopen(w, "w") as f:
                json.dump(out, f)
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    res = json.loads(data)
    if "error" in res:
        raise AssertionError("in the unprivileged child:\n" + res["error"])
    return res["ok"]


def run_cli(argv) -> dict:
    """mpwatch's CLI in this process: exit code, stdout, stderr."""
    import contextlib
    import io

    from mpwatch import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
