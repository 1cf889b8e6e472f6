"""A channel of a rank's own process, for a test to speak on (issue 39: the supervisor takes a
hello only from the process it names, supervisor.ipc.identity). The rank runs its script under
tests/fixtures/faults/lender.py, which connects to the run's channel and passes the socket here;
the test then proves the run's key on it and says hello as that process."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from pathlib import Path

import pytest

from mpwatch.contract import protocol
from tests.faults.conftest import FAULTS, control
from tests.helpers import wait_for

LENDER = FAULTS / "lender.py"


@pytest.fixture
def lend_dir():
    """Where the ranks listen to lend their channel: a short path (a socket's is at most 107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="mpw-lend-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def env(folder: Path) -> dict[str, str]:
    """The run's environment: where its ranks listen to lend their channel."""
    return {**os.environ, "LEND_DIR": str(folder)}


def chan_address(run) -> str:
    return control(run)["address"][: -len(".ctl")] + ".chan"


def borrow(run, folder: Path, rank: int = 0) -> tuple[Connection, int]:
    """A connection made by rank's own process, the key proved: (connection, that process's pid)."""
    path = folder / f"rank-{rank}.sock"
    wait_for(path.exists, 60, what=f"rank {rank} ready to lend its channel")
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(chan_address(run).encode())
        msg, fds, _, _ = socket.recv_fds(s, 64, 1)
    conn = Connection(fds[0])
    key = bytes.fromhex(control(run)["authkey"])
    answer_challenge(conn, key)  # as multiprocessing's Client does
    deliver_challenge(conn, key)
    return conn, int(msg)


def speak_for(run, folder: Path, rank: int = 0) -> Connection:
    """A channel of rank's process that said hello as it."""
    conn, pid = borrow(run, folder, rank)
    conn.send_bytes(protocol.encode({"t": "hello", "v": 1, "rank": rank, "pid": pid, "ppid": 1}))
    return conn
