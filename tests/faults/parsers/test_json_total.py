"""Property tests (issue 39): every reader of JSON from outside returns a value or a refusal
(ValueError / BadFrame) for any input, within its bounds: no RecursionError, no value nested
past MAX_DEPTH, no integer of more digits than the bound, in time linear in the input."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpwatch.contract import jsonread, protocol
from mpwatch.rundir import registry, textfiles
from mpwatch.sources.remote import wire
from tests.faults.parsers.hostile import as_bytes, budget, json_texts, json_values, nested


def depth(v: object) -> int:
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    return 0


def leaves(v: object):
    if isinstance(v, list):
        for x in v:
            yield from leaves(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from leaves(x)
    else:
        yield v


def check_bounded(v: object, strict: bool) -> None:
    assert depth(v) <= jsonread.MAX_DEPTH
    for x in leaves(v):
        if type(x) is int:
            assert len(str(abs(x))) <= (jsonread.FILE_INT_DIGITS if strict else jsonread.FRAME_INT_DIGITS)
        if strict and isinstance(x, float):
            assert x == x and abs(x) != float("inf")


@budget(200)
@given(st.one_of(json_texts, json_texts.map(lambda s: s.encode("utf-8", "surrogatepass")), as_bytes()))
def test_jsonread_gives_a_bounded_value_or_a_value_error(data):
    for read, strict in ((jsonread.loads, False), (jsonread.loads_strict, True), (textfiles.loads, True)):
        try:
            v = read(data)
        except ValueError:
            continue
        check_bounded(v, strict)


@budget(150)
@given(st.integers(0, 3 * jsonread.MAX_DEPTH), st.sampled_from(["1", '"]]][[["', '{"a": "\\\\"}', "[]", '"\\""']))
def test_the_depth_scan_agrees_with_the_parser(d, leaf):
    """Valid JSON is read exactly when it nests at most MAX_DEPTH (strings' brackets never count)."""
    text = nested(d, leaf)
    want = d + depth(json.loads(leaf))
    assert jsonread.depth_within(text.encode()) == (want <= jsonread.MAX_DEPTH)
    if want <= jsonread.MAX_DEPTH:
        assert jsonread.loads(text) == json.loads(text)
    else:
        with pytest.raises(jsonread.TooDeep):
            jsonread.loads(text)


@budget(100)
@given(json_values)
def test_a_value_the_writer_wrote_reads_back_within_the_bounds(v):
    """What mpwatch writes (json.dumps of a value not too deep) is read back, the same where it
    is within the bounds."""
    text = json.dumps(v, allow_nan=True)
    got = jsonread.loads(text) if "9" * (jsonread.FRAME_INT_DIGITS + 1) not in text else None
    if got is not None:
        assert json.dumps(got, allow_nan=True) == text


@budget(250)
@given(st.one_of(as_bytes('{"t":"batch"', '{"cmd":"status"', '"t"', '"cmd"'),
                 json_texts.map(lambda s: s.encode("utf-8", "surrogatepass")),
                 json_values.map(lambda v: json.dumps({"t": "batch", "cmd": "status", "x": v}).encode())))
def test_frames_requests_and_wire_lines_are_a_message_or_refused(data):
    for decode, key in ((protocol.decode, "t"), (protocol.decode_request, "cmd"), (wire.decode, None)):
        try:
            msg = decode(data)
        except protocol.BadFrame:
            continue
        assert isinstance(msg, dict) and (key is None or isinstance(msg[key], str))
        check_bounded(msg, strict=False)


@budget(60)
@given(st.lists(st.one_of(json_texts, as_bytes().map(lambda b: b.decode("utf-8", "replace"))), max_size=8))
def test_a_jsonl_file_of_any_lines_is_read_line_by_line(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("jsonl") / "events.jsonl"
    path.write_bytes(b"\n".join(line.replace("\n", " ").encode("utf-8", "surrogatepass") for line in lines))
    skipped = textfiles.Skipped()
    got = list(textfiles.jsonl_values(path, skipped=skipped))
    assert len(got) + skipped.bad + skipped.torn + skipped.long <= max(len(lines), 1)
    for v in got:
        check_bounded(v, strict=True)
    list(textfiles.read_jsonl(path, kinds=["report"]))


@budget(100)
@given(json_values, st.one_of(st.integers(-(10 ** 30), 10 ** 30), st.none(), st.text(max_size=3)))
def test_a_registry_entry_of_any_shape_is_an_entry_or_none(v, pid):
    raw = {"run_id": "r", "run_dir": "/x", "pid": pid, "script": "s.py", "started": 1.0, "nprocs": 1, "x": v}
    entry = registry._entry(raw)
    assert entry is None or entry["pid"] == pid
    assert registry.pid_alive(pid) in (True, False)  # never os.kill's OverflowError, never a group
    if type(pid) is int and pid <= 0:
        assert registry.pid_alive(pid) is False


@budget(200)
@given(json_values)
def test_the_coercers_take_any_value(v):
    """contract.coerce: a value read back from JSON is its type or none, never an exception
    (an int of 400 digits is no float, 1e300 is no wall time)."""
    from mpwatch.contract import coerce

    f, t, n = coerce.as_float(v), coerce.as_time(v), coerce.as_number(v)
    assert f is None or isinstance(f, float)
    assert t is None or 0 <= t < coerce.TIME_MAX
    assert n is None or isinstance(n, float)
    assert coerce.as_int(v) is None or type(v) is int
    assert coerce.as_str(v) is None or isinstance(v, str)


@pytest.mark.parametrize("where", ["int", "negative int", "string", "key", "float"])
def test_a_frame_is_read_the_same_with_or_without_a_run_of_digits_past_the_bound(where):
    """protocol.loads reads a frame without a run of FRAME_INT_DIGITS + 1 digits by json's own int
    reading (the hub's fast path): the same values as the bounded path, and an integer past the
    bound still refused, whichever path reads it."""
    at, past = "9" * jsonread.FRAME_INT_DIGITS, "9" * (jsonread.FRAME_INT_DIGITS + 1)
    text = {"int": '{"x":%s}', "negative int": '{"x":-%s}', "string": '{"x":"%s"}', "key": '{"%s":1}',
            "float": '{"x":%s.5}'}[where]
    for data in (text % at, (text % at).encode()):
        assert protocol.loads(data) == json.loads(text % at)
    for data in (text % past, (text % past).encode()):
        if where in ("int", "negative int"):
            with pytest.raises(ValueError, match="digits"):
                protocol.loads(data)
        else:  # read by the bounded path: a string, a key or a float of any digits is no integer
            assert protocol.loads(data) == json.loads(text % past)
