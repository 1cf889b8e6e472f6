"""Bad frames on a worker channel: dropped and counted, never a crash (issue 8).

A hypothesis fuzz of the decoder and of the report ledger's frame handler (the ledger
alone, with one real process as its worker), then a live one: a client that proves the
run's authkey and sends truncated, oversized, wrong-typed and random frames.
"""
import json
import math
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from multiprocessing.connection import Client as Connect

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpwatch.contract import State, protocol
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.snapshot import worker_status
from mpwatch.supervisor.workers import batch_check
from mpwatch.supervisor.workers.ledger import ReportLedger
from mpwatch.supervisor.workers.worker import TAIL, Attempt, Worker
from tests.faults import lend
from tests.faults.conftest import FAULTS, control, reporting
from tests.faults.lend import lend_dir  # noqa: F401 - a fixture
from tests.helpers import wait_for

# ----------------------------------------------------------------- strategies ----
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                    st.sampled_from(["nan", "inf", "-inf"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)), max_leaves=20)
report_items = st.one_of(
    json_values,
    st.tuples(json_values, json_values, json_values, json_values).map(list),
    st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.one_of(st.none(), st.integers()),
              st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["nan", "inf"])),
              st.dictionaries(st.text(max_size=8), json_values, max_size=3)).map(list),
    # folded entries: a fifth element, the count (a positive int, or junk)
    st.tuples(st.floats(allow_nan=False, allow_infinity=False), st.one_of(st.none(), st.integers()),
              st.one_of(st.none(), st.floats()), st.just({}), json_values).map(list),
)
frames = st.one_of(
    json_values,
    st.fixed_dictionaries({"t": st.sampled_from(["batch", "bye", "hello", "nope", ""])},
                          optional={"reports": st.one_of(json_values, st.lists(report_items, max_size=4)),
                                    "dropped": json_values, "phases": json_values, "cuda": json_values,
                                    "seq": json_values}),
)


def as_bytes(value) -> bytes:
    # Python's json writes NaN/Infinity/huge ints, as a careless or hostile peer might.
    return json.dumps(value, allow_nan=True).encode()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_decoder_turns_any_bytes_into_a_message_or_a_bad_frame(data):
    try:
        msg = protocol.decode(data)
    except protocol.BadFrame:
        return
    assert isinstance(msg, dict) and isinstance(msg["t"], str)


@settings(max_examples=300, deadline=None)
@given(frames)
def test_batch_validation_accepts_only_well_typed_reports(value):
    try:
        msg = protocol.decode(as_bytes(value))
        reports = batch_check.validate_batch(msg)
    except protocol.BadFrame:
        return
    for ts, step, loss, metrics, n in reports:
        assert type(n) is int and n >= 1
        assert isinstance(ts, float)
        assert step is None or (isinstance(step, int) and not isinstance(step, bool))
        assert loss is None or isinstance(loss, float)
        assert isinstance(metrics, dict)


@pytest.mark.parametrize("data", [
    b"[" * 100_000,  # nesting past the recursion limit
    b"\xff\xfe\x00garbage",
])
def test_nasty_frames_are_bad_frames(tmp_path, data, sleeper):
    ledger = bare_ledger(tmp_path, sleeper)
    peer = types.SimpleNamespace(rank=0, pid=sleeper.pid)
    with pytest.raises(protocol.BadFrame):
        ledger.on_frame(peer, protocol.decode(data))


@pytest.mark.parametrize("data", [
    b'{"t":"batch","reports":[[' + b"1" + b"0" * 400 + b',1,1.0,{}],[1,2,1.0,{}]]}',  # a timestamp too big for a float
    b'{"t":"batch","reports":[[1,1,' + b"1" + b"0" * 400 + b',{}],[1,2,1.0,{}]]}',  # a loss too big for a float
])
def test_a_report_past_the_bounds_is_rejected_alone(tmp_path, data, sleeper):
    """The other reports of its batch are applied (issue 22: one bad report cost the batch)."""
    ledger = bare_ledger(tmp_path, sleeper)
    peer = types.SimpleNamespace(rank=0, pid=sleeper.pid)
    ledger.on_frame(peer, protocol.decode(data))
    r = ledger.workers[0].reports
    assert (r.step, r.rejected, r.bad_frames) == (2, 1, 0) and r.rejected_why
    protocol.encode_lossy(status_of(ledger))


def test_phase_times_that_are_not_numbers_are_ignored(tmp_path, sleeper):
    ledger = bare_ledger(tmp_path, sleeper)
    peer = types.SimpleNamespace(rank=0, pid=sleeper.pid)
    huge = "1" + "0" * 400
    ledger.on_frame(peer, protocol.decode(b'{"t":"batch","reports":[[1,1,1.0,{}]],"phases":{"data":%s,'
                                          b'"compute":0.5,"x":"y"}}' % huge.encode()))
    assert ledger.workers[0].reports.phases == {"compute": 0.5}
    protocol.encode_lossy(status_of(ledger))


def test_a_cuda_view_is_checked_where_it_enters(tmp_path, sleeper):
    """The ledger keeps a CudaView only when every field has its type; a malformed one is
    none (the GPU watcher never sees it), and a batch without one keeps the last."""
    ledger = bare_ledger(tmp_path, sleeper)
    peer = types.SimpleNamespace(rank=0, pid=sleeper.pid)
    good = {"device": 0, "allocated": 5, "reserved": 8, "max_allocated": 6, "uuid": "GPU-" + "x" * 200,
            "num_ooms": 1, "alloc_retries": "many"}
    ledger.on_frame(peer, {"t": "batch", "reports": [[1.0, 1, 1.0, {}]], "cuda": good})
    assert ledger.workers[0].reports.cuda == {"device": 0, "allocated": 5, "reserved": 8, "max_allocated": 6,
                                              "uuid": "GPU-" + "x" * 92, "num_ooms": 1}
    ledger.on_frame(peer, {"t": "batch", "reports": [[2.0, 2, 1.0, {}]]})
    assert ledger.workers[0].reports.cuda is not None  # sent at most once a second: the last one stays
    for bad in ({"device": "0", "allocated": 5, "reserved": 8, "max_allocated": 6}, [1, 2], "cuda"):
        ledger.on_frame(peer, {"t": "batch", "reports": [[3.0, 3, 1.0, {}]], "cuda": bad})
        assert ledger.workers[0].reports.cuda is None
    assert ledger.workers[0].reports.step == 3


@pytest.fixture(scope="module")
def sleeper():
    """A real process to be the ledger's worker (its pid is the worker's own)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def bare_ledger(tmp_path, proc) -> ReportLedger:
    """The report ledger alone, with one worker that said hello: for driving its frame handler.
    Each call gets a run directory of its own (hypothesis calls a test many times)."""
    store = RunStore(tempfile.mkdtemp(dir=tmp_path), Settings())
    store.create()
    log = EventLog(store)
    workers = {0: Worker(0, Attempt(proc, 1), State.STARTING, "fuzz", log, strict=True)}
    ledger = ReportLedger(workers, threading.RLock(), log)
    ledger.on_hello(types.SimpleNamespace(rank=0, pid=proc.pid), {"t": "hello", "rank": 0, "pid": proc.pid})
    assert workers[0].state is State.RUNNING
    return ledger


def status_of(ledger: ReportLedger) -> dict:
    return worker_status(ledger.workers[0], time.monotonic(), TAIL, None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(frames, min_size=1, max_size=5))
def test_frame_handler_only_ever_raises_bad_frame_and_status_still_encodes(tmp_path, sleeper, batch):
    ledger = bare_ledger(tmp_path, sleeper)
    worker = types.SimpleNamespace(rank=0, pid=sleeper.pid)
    child = types.SimpleNamespace(rank=0, pid=sleeper.pid + 1)
    for value in batch:
        for peer in (worker, child):
            try:
                ledger.on_frame(peer, protocol.decode(as_bytes(value)))
            except protocol.BadFrame:
                pass
    w = json.loads(protocol.encode_lossy(status_of(ledger)))
    assert w["loss"] is None or isinstance(w["loss"], float) or w["loss"] in ("nan", "inf", "-inf")
    ledger.log.store.close()


# ------------------------------------------------------------------ live ----
def raw_send(conn, payload: bytes):
    """Bytes straight onto the connection's socket, bypassing its framing."""
    os.write(conn.fileno(), payload)


BAD_IN_STREAM = [
    b"\x00\xffgarbage\x1b[2J",
    b"[1, 2, 3]",
    b'{"no": "type"}',
    b'{"t": "batch", "reports": "x"}',
    b'{"t": "batch"}',
    b'{"t": "batch", "reports": [], "phases": 3}',
    b'{"t": 5}',
    b"null",
    b'{"t": "batch", "reports": [], "dropped": "x"}',
    b'{"t": "surprise"}',
    b"[" * 200_000,
]
# Reports that are no report, in frames that are batches: each rejected alone (not a bad frame).
REJECTED_IN_STREAM = [
    b'{"t": "batch", "reports": [[1, "step", 1.0, {}]]}',
    b'{"t": "batch", "reports": [[1, 1, "abc", {}]]}',
    b'{"t": "batch", "reports": [[1, 1, 1.0, []]]}',
    b'{"t": "batch", "reports": [[1' + b"0" * 400 + b', 1, 1.0, {}]]}',
]


def steps(run) -> int:
    return run.status()["workers"][0]["step"] or 0


@pytest.mark.timeout(120)
def test_live_bad_frames_are_dropped_counted_and_shown(headless, lend_dir):
    """A channel of rank 0's own process (lent to the test: tests/faults/lend.py) sends them."""
    run = headless(lend.LENDER, FAULTS / "steady.py", n=1, env=lend.env(lend_dir))
    wait_for(lambda: reporting(run, 1), what="rank 0 reporting")
    refused0 = run.status()["run"]["refused_connections"]
    conn = lend.speak_for(run, lend_dir)
    for frame in BAD_IN_STREAM + REJECTED_IN_STREAM:
        conn.send_bytes(frame)
    # the connection survives frames that decode badly: a good one from it still counts
    conn.send_bytes(protocol.encode_lossy({"t": "batch", "reports": [[time.time(), 7, float("nan"), {}]],
                                           "dropped": 0}))
    n = len(BAD_IN_STREAM)
    # (the rejected reports come after the bad frames, in frames of their own: waited for too)
    w0 = wait_for(lambda: (lambda w: w if w["bad_frames"] >= n and w.get("rejected", {}).get("count") == len(
        REJECTED_IN_STREAM) else None)(run.status()["workers"][0]), what=f"{n} bad frames and the rejected counted")
    rejected = w0["rejected"]
    assert rejected["count"] == len(REJECTED_IN_STREAM) and rejected["why"] == "report timestamp is not a number"
    # an oversized frame breaks the stream: counted, and that connection is closed
    raw_send(conn, struct.pack("!i", protocol.MAX_FRAME + 1) + b"x" * 100)
    wait_for(lambda: conn.poll(0.1) and _closed(conn), what="the hub to close the oversized sender")
    # a frame cut short by the sender's exit is counted too
    cut = lend.speak_for(run, lend_dir)
    raw_send(cut, struct.pack("!i", 1000) + b'{"t":"bat')
    cut.close()
    # one that stops mid-frame and stays connected holds up nobody
    stuck = lend.speak_for(run, lend_dir)
    raw_send(stuck, struct.pack("!i", 1000) + b'{"t":"bat')
    s0 = steps(run)
    wait_for(lambda: steps(run) >= s0 + 20, what="the real worker's reports to keep flowing")
    st = wait_for(lambda: (lambda s: s if s["workers"][0]["bad_frames"] == n + 2 else None)(run.status()),
                  what=f"{n + 2} bad frames")
    w = st["workers"][0]
    assert w["state"] == "running" and w["heartbeat"] == "ok"
    assert st["run"]["refused_connections"] == refused0
    events = run.events("bad_frame")
    assert [e["count"] for e in events][:2] == [1, 10] and all(e["rank"] == 0 for e in events)
    assert "not JSON" in events[0]["why"]
    # a peer without the key, and one whose first frame is not a hello, are refused
    with pytest.raises(Exception):
        Connect(lend.chan_address(run), family="AF_UNIX", authkey=b"wrong key")
    bad_hello = Connect(lend.chan_address(run), family="AF_UNIX", authkey=bytes.fromhex(control(run)["authkey"]))
    bad_hello.send_bytes(b"\xff" * 10)
    wait_for(lambda: run.status()["run"]["refused_connections"] == refused0 + 2, what="two refusals")
    # random bytes before any handshake: refused, nothing else
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(lend.chan_address(run))
        s.sendall(os.urandom(4096))
    wait_for(lambda: run.status()["run"]["refused_connections"] == refused0 + 3, what="a third refusal")
    assert run.proc.poll() is None
    s1 = steps(run)
    wait_for(lambda: steps(run) >= s1 + 5, what="reports after all that")
    for c in (stuck, bad_hello):
        c.close()
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone()


def _closed(conn) -> bool:
    try:
        conn.recv_bytes()
    except (EOFError, OSError):
        return True
    return False


def strict_json(line: str):
    def no_constants(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(line, parse_constant=no_constants)


@pytest.mark.timeout(120)
def test_nan_and_inf_losses_are_shown_as_such(headless, tmp_path):
    go = tmp_path / "go"
    run = headless(FAULTS / "nanloss.py", go, n=1)
    w = wait_for(lambda: (lambda w: w if (w["step"] or 0) >= 2 else None)(run.worker(0)), what="step 2")
    assert w["loss"] == "nan" and w["metrics"]["grad_norm"] == "nan"
    assert "nan" in run.ctl("status").stdout.split()
    # a NaN report in events.jsonl (strict JSON: spelled out), before the infinities start
    nan = run.wait_event("report", lambda r: r["loss"] == "nan" and r["step"] >= 1)[0]
    assert nan["metrics"]["grad_norm"] == "nan"
    go.write_text("")
    w = wait_for(lambda: (lambda w: w if w["loss"] == "inf" and (w["step"] or 0) >= 4 else None)(run.worker(0)),
                 what="the infinite losses")
    assert w["metrics"]["grad_norm"] == "-inf"
    # the TREND is the run's loss smoothed: a NaN or an infinity is no point of it (LOSS says them)
    assert 1.0 in w["loss_tail"] and all(isinstance(x, float) and math.isfinite(x) for x in w["loss_tail"])
    assert w["bad_frames"] == 0 and w["state"] == "running"
    human = run.ctl("status").stdout
    assert " inf " in human
    from mpwatch.sources.local import Client

    with Client.at(run.run_dir) as c:
        hist = dict(c.history(0))
    assert hist[0] == 1.0 and hist[1] == "nan" and hist[max(hist)] == "inf"
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    # events.jsonl stays strict JSON (no bare NaN/Infinity), with the values spelled out
    reports = [strict_json(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in reports if r["event"] == "report"}
    assert losses[nan["step"]] == "nan" and losses[max(losses)] == "inf"
    assert math.isinf(float(losses[max(losses)]))
    run.assert_gone()


def test_what_a_starting_rank_says_waits_for_its_pid_in_order(tmp_path, sleeper):
    """A fork says hello and reports before the main thread has its pid: between `starting` and
    `adopt` the rank's words wait (none is taken for a child's or dropped), then are handled in the
    order they came; a bad frame among them is counted as the hub counts it."""
    store = RunStore(tempfile.mkdtemp(dir=tmp_path), Settings())
    store.create()
    log = EventLog(store)
    workers: dict[int, Worker] = {}
    ledger = ReportLedger(workers, threading.RLock(), log)
    peer = types.SimpleNamespace(rank=0, pid=sleeper.pid)
    ledger.starting(0)
    ledger.on_hello(peer, {"t": "hello", "rank": 0, "pid": sleeper.pid})
    ledger.on_frame(peer, {"t": "batch", "reports": [[1.0, 7, 0.5, {}]]})
    ledger.on_frame(peer, {"t": "nonsense"})
    ledger.on_frame(peer, {"t": "batch", "reports": [[2.0, 8, 0.25, {}]]})
    assert workers == {}  # nothing handled yet, nothing lost
    workers[0] = Worker(0, Attempt(sleeper, 1), State.STARTING, "first start", log, strict=True)
    ledger.adopt(0)
    w = workers[0]
    assert w.state is State.RUNNING and w.attempt.chan_open == 1 and w.attempt.children == {}
    assert (w.reports.step, w.reports.loss, w.reports.count, w.reports.bad_frames) == (8, 0.25, 2, 1)
    ledger.on_frame(peer, {"t": "batch", "reports": [[3.0, 9, 0.125, {}]]})  # after: at once
    assert w.reports.step == 9
    store.close()
