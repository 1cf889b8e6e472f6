"""Issue 2: the wire format decodes what it encodes and rejects everything else."""
import math

import pytest

from mpwatch.contract import protocol
from mpwatch.supervisor.workers import batch_check


def test_roundtrip_batch():
    msg = {"t": protocol.BATCH, "reports": [[1.5, 3, 0.25, {"acc": 0.9}]], "dropped": 0, "phases": {"data": 0.1}}
    back = protocol.decode(protocol.encode(msg))
    assert back == msg
    assert batch_check.validate_batch(back) == [(1.5, 3, 0.25, {"acc": 0.9}, 1)]


def test_a_folded_entry_carries_its_count():
    msg = {"t": protocol.BATCH, "reports": [[1.5, 3, 0.25, {}, 7], [2.0, 4, None, {}]]}
    reports = batch_check.validate_batch(msg)
    assert [r.n for r in reports] == [7, 1] and [r.step for r in reports] == [3, 4]
    assert reports[0].loss == 0.25 and reports[1].loss is None and reports[1].ts == 2.0


def test_names_and_alert_kinds_read_back_from_json():
    from mpwatch.contract import ALERT_KINDS, Event, RunState, State, alert_kind

    assert State.of("stalled") is State.STALLED and State.of("nope") is None and State.of(3) is None
    assert RunState.of("finished") is RunState.FINISHED and Event.of("report") is Event.REPORT
    assert alert_kind("oom") == "oom" and alert_kind("?") is None and alert_kind(None) is None
    assert {"contention", "idle"} <= ALERT_KINDS


def test_non_finite_losses_survive_as_such():
    msg = {"t": protocol.BATCH, "reports": [[1.0, 1, float("nan"), {}], [2.0, 2, float("inf"), {}]]}
    back = protocol.decode(protocol.encode_lossy(msg))
    reports = batch_check.validate_batch(back)
    assert math.isnan(reports[0][2]) and reports[1][2] == float("inf")


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"[1,2]", b'{"x":1}', b"{not json", b'"str"'])
def test_garbage_is_a_bad_frame(data):
    with pytest.raises(protocol.BadFrame):
        protocol.decode(data)


@pytest.mark.parametrize("reports", [
    None, "x", [[1, 2, 3]], [["ts", 1, 0.5, {}]], [[1.0, "step", 0.5, {}]], [[1.0, 1, "loss", {}]],
    [[1.0, 1, 0.5, []]], [[True, 1, 0.5, {}]], [[1.0, 1.5, 0.5, {}]],
    [[1.0, 1, 0.5, {}, 0]], [[1.0, 1, 0.5, {}, 1.0]], [[1.0, 1, 0.5, {}, True]], [[1.0, 1, 0.5, {}, 2, 3]],
])
def test_malformed_batches_are_bad_frames(reports):
    with pytest.raises(protocol.BadFrame):
        batch_check.validate_batch({"t": protocol.BATCH, "reports": reports})


def test_requests_need_a_cmd():
    assert protocol.decode_request(b'{"cmd":"status"}') == {"cmd": "status"}
    for bad in (b"[]", b'{"cmd":1}', b"\x00\x01"):
        with pytest.raises(protocol.BadFrame):
            protocol.decode_request(bad)


@pytest.mark.parametrize("workers, stall_timeout, interval", [
    (1, 60, 0.25), (32, 60, 0.25), (64, 60, 0.5), (256, 60, 2.0), (4096, 60, 2.0),
    (64, 1.5, 0.375),  # always well inside the stall timeout
    (256, 0.1, 0.05),  # never below 50 ms
])
def test_flush_interval_grows_with_the_run_and_stays_inside_the_stall_timeout(workers, stall_timeout, interval):
    assert protocol.flush_interval(workers, stall_timeout) == interval


def test_one_set_of_coercers_reads_what_json_may_hold():
    from mpwatch.contract import as_float, as_int, as_number, as_str

    assert [as_float(v) for v in (1, 2.5, True, "1", None, 10 ** 400)] == [1.0, 2.5, None, None, None, None]
    assert [as_int(v) for v in (3, 3.0, False, "3")] == [3, None, None, None]
    assert [as_str(v) for v in ("a", 1, None)] == ["a", None, None]
    assert as_number("inf") == float("inf") and math.isnan(as_number("nan") or 0.0)
    assert [as_number(v) for v in ("nonsense", True, 2, 10 ** 400)] == [None, None, 2.0, None]
    # a batch's loss and a phase's timing go through the same one
    msg = protocol.decode(protocol.encode_lossy({"t": protocol.BATCH, "reports": [[1.0, 1, "-inf", {}]]}))
    assert batch_check.validate_batch(msg)[0][2] == float("-inf")
