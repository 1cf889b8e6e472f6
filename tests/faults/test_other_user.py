"""Another user of the box cannot list, attach to, control, or read the logs of a run (issue 8).

The run belongs to root (as a user, `make test` runs this as root through sudo: tests/privilege.py); a
forked child drops to nobody and tries.
Three layers are checked one by one: the runtime directory (0700) hides the sockets, each
socket is 0600 on its own, and the authkey (only in the 0600 control.json of a 0700 run
directory) is needed even by a process that can reach a socket.
"""
import hmac  # noqa: F401 - the handshake imports it lazily; the unprivileged child cannot
import json
import os
import shutil
import socket
import stat
import struct
import tempfile
from multiprocessing.connection import Client as Connect
from pathlib import Path

import pytest

from mpwatch.contract import protocol
from tests.faults.conftest import FAULTS, NOBODY, as_user, control, reporting, requires_root, run_cli
from tests.helpers import wait_for

pytestmark = [pytest.mark.timeout(180), requires_root]


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def try_(fn):
    """'ok' or the name of the error fn raised."""
    try:
        fn()
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__


def connect_raw(address):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(address)


def connect_guessing_key(address):
    Connect(address, family="AF_UNIX", authkey=os.urandom(32))


def connect_and_send_stop(address):
    """Skip the handshake and send a request anyway; anything but a challenge would be a leak."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(address)
        req = protocol.encode({"cmd": "stop"})
        s.sendall(struct.pack("!i", len(req)) + req)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    if b"#CHALLENGE#" not in got or b"ok" in got:
        raise AssertionError(f"unexpected reply {got!r}")
    raise ChallengeOnly()


class ChallengeOnly(Exception):
    """The server asked for the key and then hung up: nothing else was said."""


@pytest.fixture
def shared():
    """A world-traversable place for the run directory, so only the run's own modes protect it."""
    d = Path(tempfile.mkdtemp(prefix="mpwatch-other-user-"))
    d.chmod(0o755)
    (d / "nobody-tmp").mkdir()
    os.chown(d / "nobody-tmp", NOBODY, NOBODY)
    xdg = d / "xdg"  # this run's own runtime dir: loosening it below touches no other run
    xdg.mkdir()
    xdg.chmod(0o711)  # traversable: only the mpwatch directory inside it is meant to stop others
    yield d, xdg
    shutil.rmtree(d, ignore_errors=True)


def test_another_user_cannot_list_attach_control_or_read_a_run(headless, shared, tmp_path):
    d, xdg = shared
    run = headless(FAULTS / "steady.py", n=1, env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)}, start=False)
    run.run_dir = d / "run"
    try:
        run.start()
        check_other_user_is_kept_out(run, d, xdg)
    finally:
        run.cleanup()  # before the shared directory is removed


def check_other_user_is_kept_out(run, d, xdg):
    wait_for(lambda: reporting(run, 1), what="rank 0 reporting")
    ctl = control(run)
    ctl_addr, chan_addr = ctl["address"], ctl["address"][:-4] + ".chan"
    rt = Path(ctl_addr).parent
    run_id = ctl["run_id"]
    # what the owner's side promises
    assert rt == xdg / "mpwatch" and mode(rt) == 0o700 and mode(rt / "runs") == 0o700
    assert mode(ctl_addr) == 0o600 and mode(chan_addr) == 0o600
    assert mode(run.run_dir) == 0o700 and mode(run.run_dir / "control.json") == 0o600
    refused0 = run.status()["run"]["refused_connections"]
    nobody_env = {"XDG_RUNTIME_DIR": str(xdg), "MPWATCH_TMPDIR": str(d / "nobody-tmp"), "HOME": "/nonexistent"}
    logs = run.run_dir / "rank-0" / "stdout.log"

    def as_nobody():
        return {
            "ls": run_cli(["ls", "--json"]),
            "ls_text": run_cli(["ls"]),
            "attach": run_cli(["attach", str(run.run_dir)]),
            "attach_id": run_cli(["attach", run_id]),
            "ctl_dir": run_cli(["ctl", "--run", str(run.run_dir), "stop"]),
            "ctl_id": run_cli(["ctl", "--run", run_id, "kill", "all"]),
            "ctl_default": run_cli(["ctl", "status"]),
            "list_runtime": try_(lambda: os.listdir(rt)),
            "read_registry": try_(lambda: open(rt / "runs" / f"{run_id}.json").read()),
            "list_run_dir": try_(lambda: os.listdir(run.run_dir)),
            "read_log": try_(lambda: open(logs, "rb").read()),
            "read_control": try_(lambda: open(run.run_dir / "control.json").read()),
            "connect_ctl": try_(lambda: connect_raw(ctl_addr)),
            "connect_chan": try_(lambda: connect_raw(chan_addr)),
        }
    got = as_user(as_nobody, env=nobody_env)
    assert json.loads(got["ls"]["stdout"]) == [] and got["ls"]["code"] == 0
    assert got["ls_text"]["stdout"] == "no live runs\n"
    for key in ("attach", "ctl_dir"):
        assert got[key]["code"] == 2 and "is not readable by this user" in got[key]["stderr"], got[key]
    for key in ("attach_id", "ctl_id"):
        assert got[key]["code"] == 2 and f"no such run: {run_id}" in got[key]["stderr"], got[key]
    assert got["ctl_default"]["code"] == 2 and "no live mpwatch run of this user" in got["ctl_default"]["stderr"]
    for key in ("attach", "ctl_dir", "attach_id", "ctl_id", "ctl_default"):
        assert got[key]["stderr"].count("\n") == 1 and "Traceback" not in got[key]["stderr"]
    for key in ("list_runtime", "read_registry", "list_run_dir", "read_log", "read_control",
                "connect_ctl", "connect_chan"):
        assert got[key] == "PermissionError", (key, got[key])

    # Layer 2: even with the runtime directory opened up, each socket is the owner's alone.
    rt.chmod(0o711)
    try:
        got = as_user(lambda: {"ctl": try_(lambda: connect_raw(ctl_addr)),
                               "chan": try_(lambda: connect_raw(chan_addr))}, env=nobody_env)
        assert got == {"ctl": "PermissionError", "chan": "PermissionError"}
        # Layer 3: with the sockets opened up too, nothing happens without the authkey.
        os.chmod(ctl_addr, 0o666)
        os.chmod(chan_addr, 0o666)
        got = as_user(lambda: {"ctl_key": try_(lambda: connect_guessing_key(ctl_addr)),
                               "chan_key": try_(lambda: connect_guessing_key(chan_addr)),
                               "ctl_blind": try_(lambda: connect_and_send_stop(ctl_addr))}, env=nobody_env)
        assert got == {"ctl_key": "AuthenticationError", "chan_key": "AuthenticationError",
                       "ctl_blind": "ChallengeOnly"}, got
    finally:
        for p in (ctl_addr, chan_addr):
            os.chmod(p, 0o600)
        rt.chmod(0o700)
    # Layer 4: a run directory opened up still keeps every file private: the key, and the logs.
    run.run_dir.chmod(0o755)
    (run.run_dir / "rank-0").chmod(0o755)
    try:
        got = as_user(lambda: {"ctl": run_cli(["ctl", "--run", str(run.run_dir), "stop"]),
                               "key": try_(lambda: open(run.run_dir / "control.json").read()),
                               "log": try_(lambda: open(logs, "rb").read()),
                               "run": try_(lambda: open(run.run_dir / "run.json").read())}, env=nobody_env)
        assert got["ctl"]["code"] == 2 and "no readable run.json" in got["ctl"]["stderr"]
        assert got["key"] == got["log"] == got["run"] == "PermissionError"
    finally:
        run.run_dir.chmod(0o700)
        (run.run_dir / "rank-0").chmod(0o700)

    # Every attempt was refused, and the run never noticed otherwise.
    st = wait_for(lambda: (lambda s: s if s["run"]["refused_connections"] >= refused0 + 3 else None)(run.status()),
                  what="the refused connections to be counted")
    w = st["workers"][0]
    assert w["state"] == "running" and w["bad_frames"] == 0 and not run.events("stopping")
    assert run.proc.poll() is None
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone()
