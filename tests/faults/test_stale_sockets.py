"""Sockets left by SIGKILLed supervisors (issue 30, item 10): each killed run leaves its `.ctl`
and `.chan` in the runtime directory; `mpwatch ls` and the next run remove them, and only them:
a live run's sockets stay, and so do a link or a file with a socket's name, and a socket of
another user's (as root, and as uid 65534 with root's stale socket in its directory)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import pytest

from tests.faults.conftest import FAULTS, NOBODY, as_user, reporting
from tests.faults.hostile import as_nobody, needs_root, nobody_env, shared_folder
from tests.helpers import mpwatch, wait_for

pytestmark = pytest.mark.timeout(300)
STEADY = FAULTS / "steady.py"


def sockets_in(d) -> set[str]:
    return {p.name for p in d.iterdir() if p.name.endswith((".ctl", ".chan"))}


def stale_socket(path) -> None:
    """A socket file nobody listens on (what a killed supervisor leaves)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))


def _killed(headless, env):
    run = headless(STEADY, n=1, env=env)
    wait_for(lambda: reporting(run, 1), 60, what="rank 0 reporting")
    pids = run.all_pids()
    os.kill(run.proc.pid, signal.SIGKILL)
    run.wait_exit()
    run.assert_gone(*pids)
    return run


@pytest.fixture
def short_rt():
    """A runtime directory of the test's own, its path short enough for the sockets in it."""
    rt = Path(tempfile.mkdtemp(prefix="mpw-st-"))
    yield rt
    shutil.rmtree(rt, ignore_errors=True)


def test_ls_and_the_next_run_remove_the_sockets_of_killed_supervisors(headless, tmp_path, short_rt):
    rt = short_rt
    env = dict(os.environ, XDG_RUNTIME_DIR=str(rt))
    here = rt / "mpwatch"
    live = headless(STEADY, n=1, env=env)
    wait_for(lambda: reporting(live, 1), 60, what="the live run reporting")
    live_socks = sockets_in(here)
    assert len(live_socks) == 2
    killed = [_killed(headless, env) for _ in range(3)]
    # each start removed what the supervisor killed before it left; the last one's are there
    assert sockets_in(here) == live_socks | {f"{killed[-1].run_id}.ctl", f"{killed[-1].run_id}.chan"}
    stale_socket(tmp_path / "dead.sock")
    os.symlink(tmp_path / "dead.sock", here / "20200101-000000-link-00000000.ctl")
    (here / "20200101-000000-file-00000000.chan").write_text("")
    near_misses = {"20200101-000000-link-00000000.ctl", "20200101-000000-file-00000000.chan"}
    res = mpwatch("ls", env=env)
    assert res.returncode == 0, res.stderr
    assert sockets_in(here) == live_socks | near_misses
    assert live.status()["workers"][0]["state"] == "running"  # the live run never noticed
    killed = _killed(headless, env)
    assert sockets_in(here) == live_socks | near_misses | {f"{killed.run_id}.ctl", f"{killed.run_id}.chan"}
    nxt = headless(STEADY, n=1, env=env)
    wait_for(lambda: reporting(nxt, 1), 60, what="the next run reporting")
    assert sockets_in(here) == live_socks | near_misses | {f"{nxt.run_id}.ctl", f"{nxt.run_id}.chan"}


@needs_root
def test_only_this_users_sockets_are_removed():
    with shared_folder(0o755) as d:
        home = d / "home"
        home.mkdir()
        env = nobody_env(home)
        theirs = home / "xdg" / "mpwatch"

        def nobodys_stale():
            theirs.mkdir(mode=0o700)
            stale_socket(theirs / "20200101-000000-a-00000000.ctl")
            stale_socket(home / "moved.sock")  # to be put in root's runtime directory below
        as_user(nobodys_stale, env=env)
        stale_socket(theirs / "20200101-000000-b-00000000.chan")  # root's, in nobody's directory
        res = as_nobody("ls", cwd=home, env=env)
        assert res.returncode == 0, res.stderr
        assert sockets_in(theirs) == {"20200101-000000-b-00000000.chan"}
        rt = d / "rt"
        rt.mkdir(mode=0o700)
        (rt / "mpwatch").mkdir(mode=0o700)
        os.rename(home / "moved.sock", rt / "mpwatch" / "20200101-000000-c-00000000.ctl")
        assert os.lstat(rt / "mpwatch" / "20200101-000000-c-00000000.ctl").st_uid == NOBODY
        res = mpwatch("ls", env=dict(os.environ, XDG_RUNTIME_DIR=str(rt)))
        assert res.returncode == 0, res.stderr
        assert sockets_in(rt / "mpwatch") == {"20200101-000000-c-00000000.ctl"}
