"""Fixtures of the SSH tests: the test's own sshd (tests/remote/sshd.py), skipped with the
reason where one cannot be run."""
from __future__ import annotations

import pytest

from tests.remote.sshd import Sshd, why_no_sshd


@pytest.fixture
def sshd(tmp_path):
    why = why_no_sshd()
    if why is not None:
        pytest.skip(f"no test sshd: {why}")
    server = Sshd(tmp_path / "ssh").start()
    yield server
    server.kill_all()
