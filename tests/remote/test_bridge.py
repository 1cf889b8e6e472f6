"""`mpwatch bridge` itself, spoken to on its stdin/stdout as ssh would (tests/remote's other
files go through a real sshd): the versioned handshake, requests answered out of order by id,
bad input, the end of its input (it never outlives the session), a run that ends, and
another local user, who reaches nothing of this user's runs through it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import mpwatch.cli.bridge  # noqa: F401 - loaded before a test drops to nobody, who cannot read the checkout
from mpwatch.sources.remote import wire
from tests.faults.conftest import NOBODY, requires_root
from tests.helpers import FIXTURES, MPWATCH, alive, assert_gone, wait_for

pytestmark = pytest.mark.timeout(120)
WORKER = FIXTURES / "tui_worker.py"


class Bridge:
    """`python -m mpwatch bridge ARGS` on pipes."""

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([*MPWATCH, "bridge", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)

    def send(self, msg: dict) -> None:
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, f"the bridge ended: {self.proc.stderr.read().decode()}"
        return json.loads(line)

    def hello(self, lo: int = wire.MIN_VERSION, hi: int = wire.VERSION) -> dict:
        self.send({"t": "hello", "proto": wire.PROTO, "min": lo, "max": hi, "mpwatch": "test"})
        return self.recv()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


@pytest.fixture
def bridge():
    made: list[Bridge] = []

    def make(*args: str, env=None) -> Bridge:
        made.append(Bridge(*args, env=env))
        return made[-1]
    yield make
    for b in made:
        b.close()


def test_handshake_then_requests_answered_by_id(headless, bridge):
    run = headless(WORKER, n=2)
    run_id = json.loads((run.run_dir / "run.json").read_text())["run_id"]
    # The logs request below reads what rank 1 has printed by then: wait for that line first.
    wait_for(lambda: "stderr hello" in run.log(1, "stderr"), what="rank 1's hello on stderr")
    b = bridge(run_id)
    hello = b.hello()
    assert hello["t"] == "hello" and hello["proto"] == wire.PROTO and hello["v"] == wire.VERSION
    sup = json.loads((run.run_dir / "run.json").read_text())["pid"]
    assert hello["run"] == {"run_id": run_id, "run_dir": str(run.run_dir), "pid": sup}
    # several requests in flight; each reply carries its request's id
    b.send({"id": 1, "cmd": "status", "tail": 3})
    b.send({"id": 2, "cmd": "logs", "rank": 1, "stream": "stderr", "lines": 5})
    b.send({"id": 3, "cmd": "pause", "target": 7})
    got = {m["id"]: m for m in (b.recv(), b.recv(), b.recv())}
    st = got[1]["reply"]["status"]
    assert got[1]["reply"]["ok"] and st["run"]["id"] == run_id and len(st["workers"]) == 2
    assert got[2]["reply"]["lines"] == ["tui worker rank 1 stderr hello"]
    assert got[3]["reply"]["ok"] is False and "7" in got[3]["reply"]["error"]
    # garbage is answered and the bridge goes on
    b.proc.stdin.write(b"{not json\n")
    b.proc.stdin.flush()
    bad = b.recv()
    assert bad["id"] is None and bad["reply"]["ok"] is False and "bad request" in bad["reply"]["error"]
    b.send({"id": 4, "cmd": "status"})
    assert b.recv()["reply"]["ok"]
    # the ssh session ends: the bridge's input closes, and it goes away at once
    b.proc.stdin.close()
    assert b.proc.wait(10) == 0
    assert run.proc.poll() is None  # the run never notices


def test_a_client_of_another_protocol_version_is_refused_in_one_line(headless, bridge):
    run = headless(WORKER, n=1)
    b = bridge(str(run.run_dir))
    hello = b.hello(lo=wire.VERSION + 1, hi=wire.VERSION + 5)
    assert "run" not in hello and f"speaks bridge protocol {wire.MIN_VERSION}..{wire.VERSION}" in hello["error"]
    assert b.proc.wait(10) == 2


def test_no_hello_no_run_and_a_wrong_first_line(bridge):
    b = bridge("no-such-run")
    assert "no such run: no-such-run" in b.hello()["error"] and b.proc.wait(10) == 2
    b = bridge()
    b.send({"cmd": "status"})  # a request before any hello
    assert b.recv()["error"] == "the client did not start with a hello" and b.proc.wait(10) == 2


def test_a_run_that_ends_answers_gone_with_its_final_status(headless, bridge):
    run = headless(WORKER, n=1, opts=["--grace", "1"])
    b = bridge(str(run.run_dir))
    b.hello()
    run.ctl("stop")
    run.wait_exit(60)
    b.send({"id": 9, "cmd": "status"})
    msg = b.recv()
    assert msg["id"] == 9 and msg["reply"]["ok"] is False and "has ended" in msg["reply"]["error"]
    assert msg["gone"]["info"]["finished"] and msg["gone"]["final"]["run"]["state"] == "finished"
    b.proc.stdin.close()
    assert b.proc.wait(10) == 0


def bridge_as(uid: int, args: list[str], env: dict[str, str]) -> tuple[int, dict]:
    """`mpwatch bridge ARGS` in a forked child that has dropped to uid (it cannot read the
    checkout or Python's own files, so it runs the code this process has loaded): exit code
    and the hello it answered a client hello with."""
    from mpwatch import cli

    inr, inw = os.pipe()
    outr, outw = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 3
        try:
            os.dup2(inr, 0)
            os.dup2(outw, 1)
            for fd in (inr, inw, outr, outw):
                os.close(fd)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.environ.update(env)
            sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            code = cli.main(["bridge", *args])
        finally:
            os._exit(code)
    os.close(inr)
    os.close(outw)
    with os.fdopen(inw, "wb") as w:
        w.write(wire.client_hello())
    with os.fdopen(outr, "rb") as r:
        hello = json.loads(r.readline() or b"{}")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), hello


@requires_root
def test_another_user_reaches_none_of_this_users_runs_through_the_bridge(headless):
    shared = Path(tempfile.mkdtemp(prefix="mpwatch-bridge-user-"))
    shared.chmod(0o755)  # world-traversable: only mpwatch's own modes keep the other user out
    xdg = shared / "xdg"
    xdg.mkdir()
    xdg.chmod(0o711)  # as /run/user is: only the mpwatch directory in it stops others
    run = headless(WORKER, n=1, env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)}, start=False)
    run.run_dir = shared / "run"
    try:
        run.start()
        check_other_user(run, shared, xdg)
    finally:
        run.cleanup()
        shutil.rmtree(shared, ignore_errors=True)


def check_other_user(run, shared: Path, xdg: Path):
    run_id = json.loads((run.run_dir / "run.json").read_text())["run_id"]
    (shared / "nobody").mkdir()
    os.chown(shared / "nobody", NOBODY, NOBODY)
    # the bridge runs as the ssh user: here nobody, on root's machine with root's run; its login's
    # environment as sshd makes it (USER and LOGNAME its own: root's, kept through sudo, are not)
    env = {"XDG_RUNTIME_DIR": str(xdg), "MPWATCH_TMPDIR": str(shared / "nobody"), "HOME": "/nonexistent",
           "USER": "nobody", "LOGNAME": "nobody"}
    got = {what: bridge_as(NOBODY, args, env) for what, args in
           {"by id": [run_id], "by dir": [str(run.run_dir)], "newest": [], "ls": ["--ls"]}.items()}
    assert got["by id"][0] == 2 and f"no such run: {run_id}" in got["by id"][1]["error"]
    assert got["by dir"][0] == 2 and "is not readable by this user" in got["by dir"][1]["error"]
    assert got["newest"][0] == 2 and "no live mpwatch run of this user" in got["newest"][1]["error"]
    assert got["ls"][0] == 0 and got["ls"][1]["runs"] == [] and got["ls"][1]["user"] == "nobody"
    assert all("run" not in hello for _, hello in got.values())
    assert run.proc.poll() is None and run.status()["run"]["refused_connections"] == 0


def test_no_bridge_outlives_its_session(headless, bridge):
    """Killing the viewer's side (the pipe closes mid-request) ends the bridge: no orphan."""
    run = headless(WORKER, n=1)
    b = bridge(str(run.run_dir))
    b.hello()
    b.send({"id": 1, "cmd": "status"})
    b.proc.stdin.close()
    b.proc.stdout.close()  # nobody reads its replies any more
    wait_for(lambda: b.proc.poll() is not None, 15, what="the bridge to exit")
    assert_gone([b.proc.pid])
    assert alive(run.proc.pid)
