"""Wire format shared by both ends of a channel and of the control socket.

Frames are `multiprocessing.connection` messages (length-prefixed bytes) holding one
UTF-8 JSON object. JSON, not pickle: a frame from a confused or hostile peer must never
run code, only fail to decode. Every decode error is a `BadFrame`, which callers count
and drop.
"""
from __future__ import annotations

import json
import math
import re

# The worker side imports this module at `import mpwatch`: `typing` (milliseconds) for the checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# 1: worker -> supervisor only. 2: the supervisor also sends requests down the channel
# (CHECKPOINT, SET); a worker whose hello says 1 is never sent a frame. 3: the actions a
# worker runs at a step boundary (PROFILE) and their outcome (LIVE_RESULT).
VERSION = 3
DOWN_VERSION = 2  # the first version whose workers read frames from the supervisor
ACT_VERSION = 3  # the first version whose workers run STEP_ACTIONS

# Largest frame either end accepts; a worker batch is far below this.
MAX_FRAME = 1 << 20
# Largest reply a client accepts from its (authenticated) supervisor: a status of a few
# thousand workers is several MiB.
MAX_REPLY = 1 << 28
# A report past these is rejected alone by the supervisor (counted in the worker's status);
# the worker side keeps its reports well inside them (mpwatch.worker.bounds).
MAX_METRICS_ACCEPTED = 256  # metrics the supervisor takes in one report (a worker sends fewer)
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
ENV_AUTO = "MPWATCH_AUTO_HOOKS"  # "1": automatic steps after `import torch` (mpwatch.worker.auto); "0": none
# CUDA memory forensics (mpwatch.worker.cuda_memory), armed after `import torch` once the process
# initialises CUDA: "1" for torch's OOM observer (every run); the allocation history's entries kept
# (--cuda-memory-history; absent: off); the rank's folder for its allocator snapshots (rank-N/memory/).
ENV_CUDA_OOM = "MPWATCH_CUDA_OOM"
# Set by the start-up hook (worker.boot) only while it imports mpwatch for the CUDA memory
# forensics alone: the channel's hello is quiet (HELLO), the supervisor waits for no report.
ENV_HOOK_ONLY = "MPWATCH_HOOK_ONLY"
ENV_CUDA_HISTORY = "MPWATCH_CUDA_HISTORY"
ENV_MEMORY_DIR = "MPWATCH_MEMORY_DIR"
# The forkserver's (worker.boot.forkserver) last variable: room for each forked child's own environment
ENV_FORKSERVER_PAD = "MPWATCH_FORKSERVER_PAD"


def flush_interval(workers: int, stall_timeout: float) -> float:
    """The sender's batch interval for a run of this size. The supervisor's cost is mostly
    per frame, so past 32 workers the interval grows to hold the run near 128 frames a
    second (0.5 s at 64 workers, at most 2 s), always well inside the stall timeout."""
    return round(max(0.05, min(max(0.25, workers / 128), 2.0, stall_timeout / 4)), 3)

# Worker -> supervisor message types.
HELLO = "hello"  # {t, v, rank, pid, ppid, quiet}
# `quiet`: true when mpwatch's start-up hook, not the script, imported mpwatch (for the CUDA
# memory forensics): the process promises no reports; absent: it may report.
BATCH = "batch"  # {t, reports: [[ts, step, loss, metrics(, n)]], dropped, phases, cuda (a CudaView), dist}
# `dist`: true when torch.distributed is initialised in the process (absent otherwise).
# A report entry with a fifth element n stands for n consecutive report() calls folded into
# one by the sender (the last step and loss among them, their metrics merged).
# `auto`: true when the reports are automatic steps (mpwatch.worker.auto); absent: the process's own.
# `oom`: CUDA out-of-memory records (contract.cuda_view.OomRecord), at most OOM_MAX a batch.
OOM_MAX = 8
OOM_MESSAGE_MAX = 2000  # characters of an OutOfMemoryError's message a record carries
BYE = "bye"  # {t} the process is exiting normally
# A BATCH may carry `live`: entries of mpwatch.worker.control (protocol 2), each a list led by its kind:
LIVE_POLLS = "polls"  # ["polls"]: the process calls mpwatch.should_checkpoint()
# ["declare", name, type, default]: mpwatch.tunable()'s first call (type: TUNABLE_TYPES)
LIVE_DECLARE = "declare"
LIVE_DONE = "done"  # ["done", id, step, late]: request `id` took effect at `step` (late: past its step)
# ["result", id, {fields}]: what an action with an outcome (a file written) came to, after its
# "done", or instead of it when it could not start (contract.actions reads the fields)
LIVE_RESULT = "result"

# Supervisor -> worker message types (protocol 2), read by the worker's sender thread:
CHECKPOINT = "checkpoint"  # {t, id, step}: should_checkpoint() is True once, when the step reaches `step`
SET = "set"  # {t, id, name, value, step}: tunable(name) is `value` from `step` on
# An action the worker runs itself at a step boundary (report(), the automatic steps), once its
# step reaches `step` (mpwatch.worker.actions runs them; contract.actions describes them):
PROFILE = "profile"  # {t, id, step, steps, path}: torch.profiler for `steps` steps, the trace to `path`
MEMORY = "memory"  # {t, id, step, path}: torch.cuda.memory._snapshot() pickled to `path`
STEP_ACTIONS = (PROFILE, MEMORY)
TORCH_ACTIONS = (PROFILE,)  # a process that has not imported torch answers these at once: no torch
# `step` None: at the process's next call. Request ids grow through a run; a resent one is one request.
TUNABLE_TYPES = ("int", "float", "str", "bool")
TUNABLE_NAME_MAX = 64
TUNABLE_STR_MAX = 256


# A control socket's reply, {"ok": true, ...} or {"ok": false, "error": why}: what the supervisor's
# commands answer (the name Any is the checker's only: no `typing` at run time).
Reply = dict[str, "Any"]


# JSON from outside is read within bounds (contract.jsonread says why; the run files' strict
# reading is there): nesting checked by a linear scan before json's parser recurses, an
# integer's digits before int() converts them, UTF-8. Here, for the worker side loads this
# module alone.
MAX_DEPTH = 64  # arrays and objects inside each other (a status is 6 deep; an event 4)
FRAME_INT_DIGITS = 1000  # an integer's digits a frame may hold (10**400 is read, refused where it matters)
_ESCAPE = re.compile(rb"\\.", re.S)  # a string's escape (\" \\ \n ...): never a bracket or a quote
_STRING = re.compile(rb'"[^"]*"')  # a string, once escapes are gone and only brackets and quotes remain
_NOT_SCANNED = bytes(range(256)).translate(None, b'[]{}"')  # what the scan deletes (bytes.translate)


class TooDeep(ValueError):
    """JSON nested past MAX_DEPTH (or whose brackets do not pair: no JSON at all)."""


def depth_within(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether UTF-8 JSON text nests at most `limit` arrays and objects deep, read without
    parsing (brackets inside strings do not count). False also for brackets that do not pair,
    which no JSON has. Linear: at most `limit` passes, each in C."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return True  # the usual case: too few brackets to nest that deep
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)
    s = data.translate(None, _NOT_SCANNED)  # brackets and quotes alone
    if b'"' in s:
        s = _STRING.sub(b"", s)
    s = s.replace(b"{", b"[").replace(b"}", b"]")  # a mismatched pair is json's to refuse, at its depth
    for _ in range(limit):  # each pass takes away the innermost pairs: one level
        if not s:
            return True
        inner = s.replace(b"[]", b"")
        if len(inner) == len(s):
            return False  # what is left never pairs
        s = inner
    return not s


def digits(text: str) -> int:
    """The digits of an integer literal json hands its parse_int."""
    return len(text) - (text[:1] == "-")


def _frame_int(text: str) -> int:
    if digits(text) > FRAME_INT_DIGITS:
        raise ValueError(f"a number of {digits(text)} digits (at most {FRAME_INT_DIGITS})")
    return int(text)


_FRAME = json.JSONDecoder(parse_int=_frame_int)
_PLAIN = json.JSONDecoder()
# A literal longer than the bound is a run of that many ASCII digits: where the text has none (a
# worker's frame, always), json's own int reading cannot pass it, and the C scanner reads each
# int without a call back into Python (the hub's frame path at 256 ranks: 17 calls a frame fewer).
_LONG_RUN = re.compile(rb"[0-9]{%d}" % (FRAME_INT_DIGITS + 1))
_LONG_RUN_TEXT = re.compile(rf"[0-9]{{{FRAME_INT_DIGITS + 1}}}")


def bounded(decoder: json.JSONDecoder, data: bytes | bytearray | str, errors: str) -> object:
    """data's JSON value by `decoder`, its depth checked first (data as UTF-8 bytes or text;
    `errors`: how bytes that are no UTF-8 read). ValueError, never RecursionError."""
    if isinstance(data, str):
        text, raw = data, data.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(data)
        text = raw.decode("utf-8", errors)
    if not depth_within(raw):
        raise TooDeep(f"nested deeper than {MAX_DEPTH} (or brackets that do not pair)")
    try:
        return decoder.decode(text)
    except RecursionError:  # never with the depth checked; kept so no caller ever sees one
        raise TooDeep("nested too deep") from None


def loads(data: bytes | bytearray | str) -> object:
    """A frame's or a wire line's JSON value, within the bounds; ValueError says why not."""
    long_run = _LONG_RUN_TEXT.search(data) if isinstance(data, str) else _LONG_RUN.search(data)
    return bounded(_PLAIN if long_run is None else _FRAME, data, "strict")


class BadFrame(ValueError):
    """A frame that is not a well-formed message of this protocol."""


def _clean(value: object) -> object:
    # JSON has no NaN/inf; keep them readable instead of failing the frame.
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":"), allow_nan=False, default=str).encode()


def encode_lossy(msg: dict[str, Any]) -> bytes:
    """Encode, turning non-finite floats into strings (and keys JSON has no room for, a tuple's,
    into theirs) rather than failing."""
    try:
        return encode(msg)
    except (ValueError, TypeError):
        return json.dumps(_deep_clean(msg), separators=(",", ":"), allow_nan=False, default=str).encode()


def _deep_clean(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _deep_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_clean(v) for v in value]
    return _clean(value)


def decode(data: bytes) -> dict[str, Any]:
    """A frame's message: a JSON object with a string `t`, read within the bounds (nesting,
    digits, UTF-8); anything else is a BadFrame."""
    try:
        msg = loads(data)
    except ValueError as exc:  # UnicodeDecodeError and TooDeep are ValueErrors
        raise BadFrame(f"not JSON: {exc}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise BadFrame("not a message object")
    return msg


def decode_request(data: bytes) -> dict[str, Any]:
    """A control request: a JSON object with a string `cmd`."""
    try:
        req = loads(data)
    except ValueError as exc:
        raise BadFrame(f"not JSON: {exc}") from None
    if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
        raise BadFrame("not a request object with a 'cmd'")
    return req
