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

# 1: worker -> supervisor only. 2: the supervisor also sends requests down the channel
# (CHECKPOINT, SET); a worker whose hello says 1 is never sent a frame.
VERSION = 2
DOWN_VERSION = 2  # the first version whose workers read frames from the supervisor

# Largest frame either end accepts; a worker batch is far below this.
MAX_FRAME = 1 << 20
# Largest reply a client accepts from its (authenticated) supervisor: a status of a few
# thousand workers is several MiB.
MAX_REPLY = 1 << 28
# A report past these is rejected alone by the supervisor (counted in the worker's status);
# the worker side keeps its reports well inside them (mpwatch.sender.bounds).
MAX_METRICS = 256  # metrics a report may carry
MAX_METRIC_NAME = 200
MAX_METRIC_TEXT = 4096  # characters of a text metric
MAX_EXACT = 1 << 63  # an integer metric past this is refused: no reader could show it
# The largest step a request may name (and a worker's sender sends: mpwatch.sender.bounds): past
# 2^53 an integer is no exact double, so not every JSON reader holds it.
MAX_STEP = 1 << 53

# Environment a worker sees (torchrun's contract plus ours).
ENV_ADDRESS = "MPWATCH_CHANNEL"
ENV_AUTHKEY = "MPWATCH_AUTHKEY"
ENV_RANK = "MPWATCH_RANK"
ENV_RUN = "MPWATCH_RUN_ID"
ENV_STACK_FILE = "MPWATCH_STACK_FILE"
ENV_SUPERVISOR_PID = "MPWATCH_SUPERVISOR_PID"
ENV_FLUSH = "MPWATCH_FLUSH_S"  # how often the worker's sender ships a batch
ENV_TUNABLES = "MPWATCH_TUNABLES"  # JSON {name: value}: the tunables' values when the worker was started
ENV_AUTO = "MPWATCH_AUTO_HOOKS"  # "1": automatic steps once torch is imported (mpwatch.auto); "0": none


def flush_interval(workers: int, stall_timeout: float) -> float:
    """The sender's batch interval for a run of this size. The supervisor's cost is mostly
    per frame, so past 32 workers the interval grows to hold the run near 128 frames a
    second (0.5 s at 64 workers, at most 2 s), always well inside the stall timeout."""
    return round(max(0.05, min(max(0.25, workers / 128), 2.0, stall_timeout / 4)), 3)

# Worker -> supervisor message types.
HELLO = "hello"  # {t, v, rank, pid, ppid}
BATCH = "batch"  # {t, reports: [[ts, step, loss, metrics(, n)]], dropped, phases, cuda (validate_cuda), dist}
# `dist`: true when torch.distributed is initialised in the process (absent otherwise).
# A report entry with a fifth element n stands for n consecutive report() calls folded into
# one by the sender (the last step and loss among them, their metrics merged).
# `auto`: true when the reports are automatic steps (mpwatch.auto); absent: the process's own.
BYE = "bye"  # {t} the process is exiting normally
# A BATCH may carry `live`: entries of mpwatch.live (protocol 2), each a list led by its kind:
LIVE_POLLS = "polls"  # ["polls"]: the process calls mpwatch.should_checkpoint()
# ["declare", name, type, default]: mpwatch.tunable()'s first call (type: TUNABLE_TYPES)
LIVE_DECLARE = "declare"
LIVE_DONE = "done"  # ["done", id, step, late]: request `id` took effect at `step` (late: past its step)

# Supervisor -> worker message types (protocol 2), read by the worker's sender thread:
CHECKPOINT = "checkpoint"  # {t, id, step}: should_checkpoint() is True once, when the step reaches `step`
SET = "set"  # {t, id, name, value, step}: tunable(name) is `value` from `step` on
# `step` None: at the process's next call. Request ids grow through a run; a resent one is one request.
TUNABLE_TYPES = ("int", "float", "str", "bool")
TUNABLE_NAME_MAX = 64
TUNABLE_STR_MAX = 256


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


def validate_batch(msg: dict[str, Any], rejected: list[str] | None = None) -> list[Report]:
    """Checked reports of a BATCH frame: a list of (ts, step, loss, metrics, n), n being how
    many report() calls the entry stands for. On the supervisor's hot path, so exact type
    checks (bool is not int here) and one pass. A frame that is no batch is a BadFrame; a
    report that is not one, or past the bounds (MAX_METRICS...), too, unless `rejected` is
    given: then it alone is left out and why is added there."""
    reports = msg.get("reports")
    if type(reports) is not list:
        raise BadFrame("batch without a reports list")
    out = []
    for item in reports:
        try:
            out.append(_report(item))
        except BadFrame as exc:
            if rejected is None:
                raise
            rejected.append(str(exc))
    return out


def _report(item: object) -> Report:
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
    if metrics and (len(metrics) > MAX_METRICS or not all(map(_fair_metric, metrics.items()))):
        raise BadFrame(_unfair(metrics))
    return Report._make((ts, step, loss, metrics, n))  # faster than Report(...) on this hot path


def _fair_metric(kv: tuple[str, object]) -> bool:
    k, v = kv
    if len(k) > MAX_METRIC_NAME:
        return False
    if isinstance(v, int):
        return -MAX_EXACT <= v <= MAX_EXACT
    return not isinstance(v, str) or len(v) <= MAX_METRIC_TEXT


def _unfair(metrics: dict[str, Any]) -> str:
    """Why a report's metrics are past the bounds (the slow path, for the rejected only)."""
    if len(metrics) > MAX_METRICS:
        return f"report has {len(metrics)} metrics (at most {MAX_METRICS})"
    for k, v in metrics.items():
        if _fair_metric((k, v)):
            continue
        if len(k) > MAX_METRIC_NAME:
            return f"a metric name of {len(k)} characters (at most {MAX_METRIC_NAME})"
        if isinstance(v, int):
            return f"metric {k[:40]}: an integer too large for a float"
        return f"metric {k[:40]}: a text of {len(v)} characters (at most {MAX_METRIC_TEXT})"
    return "report metrics past the bounds"


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
