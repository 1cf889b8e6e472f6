"""Fixtures of the SSH tests: the test's own sshd (tests/remote/sshd.py), skipped with the
reason where one cannot be run."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.remote.sshd import Sshd, why_no_sshd


@pytest.fixture
def sshd():
    why = why_no_sshd()
    if why is not None:
        pytest.skip(f"no test sshd: {why}")
    # A short folder: each address's runtime directory holds the runs' sockets (AF_UNIX paths are short)
    folder = Path(tempfile.mkdtemp(prefix="mpw-ssh-"))
    server = Sshd(folder).start()
    yield server
    server.kill_all()
    shutil.rmtree(folder, ignore_errors=True)
