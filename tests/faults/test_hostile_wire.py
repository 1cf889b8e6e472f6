"""Hostile peers on the wires (issue 22, items 6, 8 and 9): the bridge answers every request,
even one it cannot relay, and the ones in flight when its input closes; connections that
never speak free their threads at the handshake's deadline; a worker's reports that are too
big or hold numbers no float can are bounded on its side, and a bad one is rejected alone on
the supervisor's, counted and said in the status."""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time

import psutil
import pytest

from tests.documented import HANDSHAKE_S
from tests.faults import lend
from tests.faults.conftest import FAULTS, control, reporting
from tests.faults.lend import lend_dir  # noqa: F401 - a fixture
from tests.helpers import FIXTURES, MPWATCH, wait_for

pytestmark = pytest.mark.timeout(240)
WORKER = FIXTURES / "tui_worker.py"


class Bridge:
    """`mpwatch bridge RUN` on pipes, read with a deadline (a request left unanswered fails)."""

    def __init__(self, run_dir, env=None):
        self.proc = subprocess.Popen([*MPWATCH, "bridge", str(run_dir)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.buf = b""  # read from stdout's fd, not yet a whole line
        self.send({"t": "hello", "proto": "mpwatch-bridge", "min": 1, "max": 1, "mpwatch": "test"})
        assert "run" in self.recv(), "no run in the bridge's hello"

    def send(self, msg: dict | bytes) -> None:
        self.proc.stdin.write(msg if isinstance(msg, bytes) else json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = 30.0) -> dict:
        return json.loads(self.recv_line(timeout))

    def recv_line(self, timeout: float = 30.0) -> bytes:
        """The next reply line, read from the pipe's fd itself: a buffered readline after a
        select would leave a second reply that came with the first in its buffer, unseen."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no answer from the bridge within {timeout:g}s"
            chunk = os.read(fd, 1 << 20)
            assert chunk, f"the bridge ended: {self.proc.stderr.read().decode()}"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_the_bridge_answers_a_request_it_cannot_relay_and_goes_on(headless):
    run = headless(WORKER, n=1, opts=["--grace", "1"])
    wait_for(lambda: reporting(run, 1, 0), 60, what="rank 0 running")
    b = Bridge(run.run_dir)
    try:
        b.send(b'{"id": 1, "cmd": "status", "tail": ' + nested(990) + b"}\n")
        b.send({"id": 2, "cmd": "status", "self": 1})
        b.send({"id": 3, "cmd": "status", "tail": 1})
        got = {m["id"]: m for m in (b.recv(), b.recv(), b.recv())}
        assert set(got) == {None, 2, 3}
        # 990 deep is past what the wire reads (contract.jsonread.MAX_DEPTH, issue 39): refused,
        # with why, its id unread; an argument named `self` is an argument like any other (cmd
        # is positional-only): answered; and the relay went on
        refused = got[None]["reply"]
        assert refused["ok"] is False and refused["error"].startswith("bad request: not JSON: nested deeper"), refused
        assert "status" not in refused
        for i in (2, 3):
            assert got[i]["reply"]["ok"] and got[i]["reply"]["status"]["workers"][0]["rank"] == 0, got[i]
    finally:
        b.close()


def test_requests_in_flight_when_the_input_closes_are_carried_out(headless):
    """`echo '... pause 0' | ssh host mpwatch bridge RUN`: the pause happens and is answered."""
    run = headless(WORKER, n=1, opts=["--grace", "1"])
    wait_for(lambda: reporting(run, 1, 0), 60, what="rank 0 running")
    hello = json.dumps({"t": "hello", "proto": "mpwatch-bridge", "min": 1, "max": 1, "mpwatch": "test"})
    req = json.dumps({"id": 7, "cmd": "pause", "target": 0})
    res = subprocess.run([*MPWATCH, "bridge", str(run.run_dir)], input=f"{hello}\n{req}\n", capture_output=True,
                         text=True, timeout=60)
    lines = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert [m.get("id") for m in lines[1:]] == [7] and lines[1]["reply"]["ok"], res.stdout
    run.wait_event("paused", lambda r: r["rank"] == 0)


def silent_connections(address: str, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(address)
        out.append(s)
    return out


@pytest.mark.parametrize("which", ["control", "channel"])
def test_connections_that_never_speak_free_their_threads_at_the_handshake_deadline(headless, which):
    """Many connections of this user that never answer the challenge (and never close): each
    is cut off at the handshake's deadline, its thread ends; the run answers throughout."""
    run = headless(FAULTS / "steady.py", n=1)
    wait_for(lambda: reporting(run, 1), 60, what="rank 0 reporting")
    sup = psutil.Process(run.proc.pid)
    base = sup.num_threads()
    addr = control(run)["address"]
    addr = addr if which == "control" else addr[:-4] + ".chan"
    silent = silent_connections(addr, 300)
    try:
        wait_for(lambda: sup.num_threads() > base + 100, 30, what="a thread per silent connection")
        assert run.status()["workers"][0]["state"] == "running"  # the run answers meanwhile
        wait_for(lambda: sup.num_threads() <= base + 5, HANDSHAKE_S + 30,
                 what=f"the {which} socket's handshake threads to end (threads: {sup.num_threads()}, before {base})")
        # Each cut off, not left half-open (the last few threads may still be closing theirs).
        wait_for(lambda: all(_peer_closed(s) for s in silent), 30,
                 what=f"every silent connection closed by the {which} socket")
        assert run.status()["run"]["refused_connections"] >= 300
    finally:
        for s in silent:
            s.close()
    run.ctl("stop")
    assert run.wait_exit(60) == 1


def _peer_closed(s: socket.socket) -> bool:
    """The other end shut the connection (what is left to read is the challenge, then EOF)."""
    s.setblocking(False)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_one_connection_that_never_speaks_holds_nothing_up(headless):
    run = headless(FAULTS / "steady.py", n=1)
    wait_for(lambda: reporting(run, 1), 60, what="rank 0 reporting")
    (s,) = silent_connections(control(run)["address"], 1)
    try:
        assert run.status()["workers"][0]["state"] == "running"
        wait_for(lambda: _peer_closed(s), HANDSHAKE_S + 20, what="the silent peer to be cut off")
    finally:
        s.close()
    run.ctl("stop")
    assert run.wait_exit(60) == 1




def test_reports_too_big_or_too_large_for_a_float_are_bounded_by_the_worker(headless):
    """A 1 MB metric in every report, a loss of 10**400, 300 metrics: every batch used to go
    past the frame limit (no step shown for the whole run) or fail whole. The worker cuts the
    text (saying so), sends the number as inf, keeps 64 metrics and notes the rest: each report
    arrives and none is rejected."""
    run = headless(FAULTS / "hostile_reports.py", n=1)
    st = wait_for(lambda: (lambda s: s if (s["workers"][0]["step"] or 0) >= 20 else None)(run.status()), 60,
                  what="rank 0 at step 20")
    w = st["workers"][0]
    blob = w["metrics"]["blob"]
    assert blob.startswith("x" * 256) and blob.endswith("(cut: 1000000 characters)") and len(blob) < 300
    assert w["metrics"]["huge"] in ("inf", float("inf")) and w["loss"] in ("inf", float("inf"))
    assert w["metrics"]["…"] == "238 more metric(s) not sent" and len(w["metrics"]) == 65  # 302 given
    assert w["bad_frames"] == 0 and "rejected" not in w
    run.ctl("stop")
    assert run.wait_exit(60) == 1


def test_a_bad_report_is_rejected_alone_counted_and_said(headless, lend_dir):
    """A channel of the rank's own process (lent to the test: tests/faults/lend.py) sends a batch
    of three reports, the middle one past the bounds: the other two are applied, the bad one is
    counted with its reason in the status, `ctl status`, the TUI's row note, and an event."""
    from mpwatch.contract import protocol
    from mpwatch.tui.render import view

    run = headless(lend.LENDER, FIXTURES / "no_report.py", n=1, env=lend.env(lend_dir))
    conn, pid = lend.borrow(run, lend_dir)
    try:
        conn.send_bytes(protocol.encode({"t": "hello", "v": 1, "rank": 0, "pid": pid, "ppid": 1}))
        now = time.time()
        conn.send_bytes(protocol.encode({"t": "batch", "dropped": 0, "reports": [
            [now, 5, 0.5, {}], [now, 6, 10 ** 400, {}], [now, 7, 0.25, {"x" * 300: 1}], [now, 8, 0.125, {}]]}))
        st = wait_for(lambda: (lambda s: s if s["workers"][0]["step"] == 8 else None)(run.status()), 30,
                      what="the good reports applied")
        w = st["workers"][0]
        assert w["rejected"] == {"count": 2, "why": "a metric name of 300 characters (at most 200)"}
        assert w["loss"] == 0.125 and w["bad_frames"] == 0 and w["reports"] == 2
        assert "2 reports rejected: a metric name of 300 characters" in view.note_text(w)
        assert "2 reports rejected: a metric name of 300" in run.ctl("status").stdout
        ev = run.wait_event("reports_rejected")
        assert ev[0]["rank"] == 0 and ev[0]["count"] == 2
    finally:
        conn.close()
    run.ctl("stop")
    assert run.wait_exit(60) == 1
