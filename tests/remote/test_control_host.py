"""Issue 23 over ssh: `ctl --host HOST checkpoint all` and `ctl --host HOST set` reach a run on
another machine (the test's own sshd) as they do here, and a refusal there is one line and exit
code 2 here."""
from __future__ import annotations

import re

import pytest

from tests.helpers import FIXTURES, one_line_error
from tests.remote.sshd import ADDRESSES
from tests.remote.test_cli_host import host

pytestmark = pytest.mark.timeout(180)
A, _ = ADDRESSES


def test_checkpoint_and_set_over_ssh(headless, sshd):
    run = headless(FIXTURES / "control_loop.py", "0", "0.05", n=2, env=sshd.node_env(A))
    run.wait_event("tunable_declared", count=4)
    res = host(sshd, "ctl", "--host", A, "checkpoint", "all")
    assert res.returncode == 0, res.stderr
    s = int(re.match(r"checkpoint asked of ranks 0-1 at step (\d+)", res.stdout).group(1))
    assert {e["step"] for e in run.wait_event("checkpoint_taken", timeout=60, count=2)} == {s}
    res = host(sshd, "ctl", "--host", A, "set", "batch", "64")
    assert res.returncode == 0 and re.match(r"batch = 64 from step \d+ on ranks 0-1 \(now 32\)", res.stdout)
    assert run.wait_event("tunable_set")[0]["by"].startswith("ctl ")
    one_line_error(host(sshd, "ctl", "--host", A, "set", "batch", "big"), "batch is an int: expected an int")
