"""Wire format shared by both ends of a channel and of the control socket.

Frames are `multiprocessing.connection` messages (length-prefixed bytes) holding one
UTF-8 JSON object. JSON, not pickle: a frame from a confused or hostile peer must never
run code, only fail to decode. Every decode error is a `BadFrame`, which callers count
and drop.
"""
from __future__ import annotations

import json
import math

VERSION = 1

# Largest frame either end accepts; a worker batch is far below this.
MAX_FRAME = 1 << 20

# Environment a worker sees (torchrun's contract plus ours).
ENV_ADDRESS = "MPWATCH_CHANNEL"
ENV_AUTHKEY = "MPWATCH_AUTHKEY"
ENV_RANK = "MPWATCH_RANK"
ENV_RUN = "MPWATCH_RUN_ID"
ENV_STACK_FILE = "MPWATCH_STACK_FILE"
ENV_SUPERVISOR_PID = "MPWATCH_SUPERVISOR_PID"

# Worker -> supervisor message types.
HELLO = "hello"  # {t, v, rank, pid, ppid}
BATCH = "batch"  # {t, reports: [[ts, step, loss, metrics]], seq, dropped, phases, cuda}
BYE = "bye"  # {t} the process is exiting normally


class BadFrame(ValueError):
    """A frame that is not a well-formed message of this protocol."""


def _clean(value):
    # JSON has no NaN/inf; keep them readable instead of failing the frame.
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def encode(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":"), allow_nan=False, default=str).encode()


def encode_lossy(msg: dict) -> bytes:
    """Encode, turning non-finite floats into strings rather than failing."""
    try:
        return encode(msg)
    except ValueError:
        return encode(_deep_clean(msg))


def _deep_clean(value):
    if isinstance(value, dict):
        return {str(k): _deep_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_clean(v) for v in value]
    return _clean(value)


def decode(data: bytes) -> dict:
    try:
        msg = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: "[[[[..."
        raise BadFrame(f"not JSON: {exc}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise BadFrame("not a message object")
    return msg


def as_float(value):
    """A loss or metric as a float: numbers, their string forms for NaN/inf, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an int with hundreds of digits is not a loss
            return None
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def validate_batch(msg: dict) -> list:
    """Checked reports of a BATCH frame: a list of (ts, step, loss, metrics).
    On the supervisor's hot path, so exact type checks (bool is not int here) and one
    pass; anything unexpected is a BadFrame."""
    reports = msg.get("reports")
    if type(reports) is not list:
        raise BadFrame("batch without a reports list")
    out = []
    for item in reports:
        if type(item) is not list or len(item) != 4:
            raise BadFrame("report is not [ts, step, loss, metrics]")
        ts, step, loss, metrics = item
        if type(ts) is not float:
            if type(ts) is not int or (ts := as_float(ts)) is None:
                raise BadFrame("report timestamp is not a number")
        if step is not None and type(step) is not int:
            raise BadFrame("report step is not an integer")
        if loss is not None and type(loss) is not float and (loss := as_float(loss)) is None:
            raise BadFrame("report loss is not a number")
        if type(metrics) is not dict:
            raise BadFrame("report metrics is not an object")
        out.append((ts, step, loss, metrics))
    return out


def decode_request(data: bytes) -> dict:
    """A control request: a JSON object with a string `cmd`."""
    try:
        req = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadFrame(f"not JSON: {exc}") from None
    if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
        raise BadFrame("not a request object with a 'cmd'")
    return req
