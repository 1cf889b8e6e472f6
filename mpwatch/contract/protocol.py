"""Wire format shared by both ends of a channel and of the control socket.

Frames are `multiprocessing.connection` messages (length-prefixed bytes) holding one
UTF-8 JSON object. JSON, not pickle: a frame from a confused or hostile peer must never
run code, only fail to decode. Every decode error is a `BadFrame`, which callers count
and drop.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, NamedTuple

from mpwatch.contract.coerce import as_float, as_number

if TYPE_CHECKING:  # the worker side imports this module: the schema only for the checker
    from mpwatch.contract.status import CudaView

VERSION = 1

# Largest frame either end accepts; a worker batch is far below this.
MAX_FRAME = 1 << 20
# Largest reply a client accepts from its (authenticated) supervisor: a status of a few
# thousand workers is several MiB.
MAX_REPLY = 1 << 28

# Environment a worker sees (torchrun's contract plus ours).
ENV_ADDRESS = "MPWATCH_CHANNEL"
ENV_AUTHKEY = "MPWATCH_AUTHKEY"
ENV_RANK = "MPWATCH_RANK"
ENV_RUN = "MPWATCH_RUN_ID"
ENV_STACK_FILE = "MPWATCH_STACK_FILE"
ENV_SUPERVISOR_PID = "MPWATCH_SUPERVISOR_PID"
ENV_FLUSH = "MPWATCH_FLUSH_S"  # how often the worker's sender ships a batch
ENV_AUTO = "MPWATCH_AUTO_HOOKS"  # "1": automatic steps once torch is imported (mpwatch.auto); "0": none


def flush_interval(workers: int, stall_timeout: float) -> float:
    """The sender's batch interval for a run of this size. The supervisor's cost is mostly
    per frame, so past 32 workers the interval grows to hold the run near 128 frames a
    second (0.5 s at 64 workers, at most 2 s), always well inside the stall timeout."""
    return round(max(0.05, min(max(0.25, workers / 128), 2.0, stall_timeout / 4)), 3)

# Worker -> supervisor message types.
HELLO = "hello"  # {t, v, rank, pid, ppid}
BATCH = "batch"  # {t, reports: [[ts, step, loss, metrics(, n)]], dropped, phases, cuda (validate_cuda)}
# A report entry with a fifth element n stands for n consecutive report() calls folded into
# one by the sender (the last step and loss among them, their metrics merged).
# `auto`: true when the reports are automatic steps (mpwatch.auto); absent: the process's own.
BYE = "bye"  # {t} the process is exiting normally


class BadFrame(ValueError):
    """A frame that is not a well-formed message of this protocol."""


class Report(NamedTuple):
    """A checked report of a BATCH (the supervisor's side: the worker sends plain lists)."""

    ts: float  # the worker's wall clock
    step: int | None
    loss: float | None
    metrics: dict[str, Any]
    n: int  # how many report() calls the entry stands for


def _clean(value: object) -> object:
    # JSON has no NaN/inf; keep them readable instead of failing the frame.
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":"), allow_nan=False, default=str).encode()


def encode_lossy(msg: dict[str, Any]) -> bytes:
    """Encode, turning non-finite floats into strings rather than failing."""
    try:
        return encode(msg)
    except ValueError:
        return json.dumps(_deep_clean(msg), separators=(",", ":"), allow_nan=False, default=str).encode()


def _deep_clean(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _deep_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_clean(v) for v in value]
    return _clean(value)


def decode(data: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: "[[[[..."
        raise BadFrame(f"not JSON: {exc}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise BadFrame("not a message object")
    return msg


def validate_batch(msg: dict[str, Any]) -> list[Report]:
    """Checked reports of a BATCH frame: a list of (ts, step, loss, metrics, n), n being how
    many report() calls the entry stands for. On the supervisor's hot path, so exact type
    checks (bool is not int here) and one pass; anything unexpected is a BadFrame."""
    reports = msg.get("reports")
    if type(reports) is not list:
        raise BadFrame("batch without a reports list")
    out = []
    for item in reports:
        if type(item) is not list:
            raise BadFrame("report is not [ts, step, loss, metrics]")
        if len(item) == 4:
            ts, step, loss, metrics = item
            n = 1
        elif len(item) == 5:
            ts, step, loss, metrics, n = item
            if type(n) is not int or n < 1:
                raise BadFrame("report count is not a positive integer")
        else:
            raise BadFrame("report is not [ts, step, loss, metrics]")
        if type(ts) is not float and (type(ts) is not int or (ts := as_float(ts)) is None):
            raise BadFrame("report timestamp is not a number")
        if step is not None and type(step) is not int:
            raise BadFrame("report step is not an integer")
        if loss is not None and type(loss) is not float and (loss := as_number(loss)) is None:
            raise BadFrame("report loss is not a number")
        if type(metrics) is not dict:
            raise BadFrame("report metrics is not an object")
        out.append(Report._make((ts, step, loss, metrics, n)))  # faster than Report(...) on this hot path
    return out


def validate_cuda(raw: object) -> CudaView | None:
    """A BATCH's `cuda` (the worker's allocator view, contract.status.CudaView), or None when
    it is not one: every field is checked before anything reads it, a uuid is cut short."""
    if not isinstance(raw, dict):
        return None
    need = ("device", "allocated", "reserved", "max_allocated")
    if not all(type(raw.get(k)) is int for k in need):
        return None
    view: CudaView = {"device": raw["device"], "allocated": raw["allocated"], "reserved": raw["reserved"],
                      "max_allocated": raw["max_allocated"]}
    uuid = raw.get("uuid")
    if isinstance(uuid, str):
        view["uuid"] = uuid[:96]
    for key in ("alloc_retries", "num_ooms", "inactive_split"):
        v = raw.get(key)
        if type(v) is int:
            view[key] = v
    return view


def decode_request(data: bytes) -> dict[str, Any]:
    """A control request: a JSON object with a string `cmd`."""
    try:
        req = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadFrame(f"not JSON: {exc}") from None
    if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
        raise BadFrame("not a request object with a 'cmd'")
    return req
