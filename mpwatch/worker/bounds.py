"""Each report bounded and coerced before it is sent, so that one odd report never costs the
batch it travels in (a frame past protocol.MAX_FRAME, or a number no float can hold, would be
refused whole by the supervisor) and the supervisor's bounds (protocol.MAX_METRICS_ACCEPTED...)
are never reached by a well-meaning script.

- a step that is no int is made one when it can be (a numpy int), else dropped; one past 2^53
  (contract.protocol.MAX_STEP: the largest integer every reader holds exactly) is dropped too,
  and said once on the process's stderr;
- a loss or a metric that is an int too big for a float exactly is sent as a float (10**400:
  inf); a number type that is not int or float (a numpy scalar) as a float;
- a string metric longer than MAX_TEXT is cut, with a note of its length; any other value
  (a list, an object) is kept when its JSON is short, else cut as text the same way;
- at most MAX_METRICS_SENT metrics a report (the rest counted in one note), names cut at MAX_NAME;
- at most MAX_PHASES phase names.

Runs on the worker's sender thread at flush (report() only appends: it stays microseconds),
over at most protocol-size batches (mpwatch.worker.batch folds a long run of reports into a few).
Standard library only.
"""
from __future__ import annotations

import json
import math
import sys

MAX_TEXT = 256  # characters of a metric's text
MAX_NAME = 64  # characters of a metric's or a phase's name
MAX_METRICS_SENT = 64  # metrics a report carries as sent (the supervisor takes more)
MAX_PHASES = 64
EXACT = 1 << 53  # past this an int is no exact float: sent as one, so that every reader can use it
_said: set[str] = set()  # what was said on stderr once in this process ("step")
CUT_NOTE = "…(cut: {n} characters)"
MORE = "…"  # the note of the metrics past MAX_METRICS_SENT: its value says how many


def number(v: object) -> object:
    """A loss or a metric's number as JSON can carry it to any reader; other values as they are."""
    if v is None or isinstance(v, (str, bool, float)):
        return v
    if isinstance(v, int):
        if -EXACT <= v <= EXACT:
            return v
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    as_float = getattr(v, "__float__", None)
    if callable(as_float):
        try:
            return float(as_float())  # a numpy scalar, a 0-d tensor
        except (TypeError, ValueError, OverflowError, RuntimeError):
            return None
    return v


def _text(s: str) -> str:
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + CUT_NOTE.format(n=len(s))


def metric(v: object) -> object:
    """One metric's value, bounded."""
    v = number(v)
    if isinstance(v, str):
        return _text(v)
    if v is None or isinstance(v, (int, float, bool)):
        return v
    try:
        encoded = json.dumps(v, default=str)
    except (ValueError, TypeError, RecursionError):
        return _text(repr(v))
    return v if len(encoded) <= MAX_TEXT else _text(encoded)


def _name(k: object) -> str:
    k = k if isinstance(k, str) else str(k)
    return k if len(k) <= MAX_NAME else k[:MAX_NAME - 1] + "…"


def metrics(m: dict[str, object]) -> dict[str, object]:
    """A report's metrics, bounded (at most MAX_METRICS_SENT and one note of the rest)."""
    out: dict[str, object] = {}
    for i, (k, v) in enumerate(m.items()):
        if i == MAX_METRICS_SENT:
            out[MORE] = f"{len(m) - MAX_METRICS_SENT} more metric(s) not sent"
            break
        out[_name(k)] = metric(v)
    return out


def step(s: object) -> int | None:
    """A step as an int (a numpy int too); None when it is none, or past any real count."""
    if s is None or isinstance(s, bool):
        return None
    if isinstance(s, float) and s.is_integer():
        s = int(s)
    index = getattr(s, "__index__", None)  # an int, a numpy int; a float has none
    n = index() if callable(index) else None
    if not isinstance(n, int):
        return None
    if -EXACT <= n <= EXACT:
        return n
    if "step" not in _said:
        _said.add("step")
        shown = str(n) if n.bit_length() < 128 else f"a {n.bit_length()}-bit number"
        try:
            sys.stderr.write(f"mpwatch: report(step={shown}): a step past 2^53 is not sent (the largest "
                             "integer every reader holds exactly); mpwatch shows no step for this rank\n")
        except (OSError, ValueError, AttributeError):
            pass
    return None


def reports(entries: list[list[object]]) -> list[list[object]]:
    """A batch's reports ([ts, step, loss, metrics(, n)]) bounded in place and returned."""
    for e in entries:
        e[1] = step(e[1])
        e[2] = number(e[2])
        m = e[3]
        if m:
            e[3] = metrics(m) if isinstance(m, dict) else {}
    return entries


def phases(p: dict[str, float]) -> dict[str, float]:
    """The phase totals, at most MAX_PHASES names."""
    if len(p) <= MAX_PHASES and all(len(k) <= MAX_NAME for k in p):
        return p
    return {_name(k): v for k, v in list(p.items())[:MAX_PHASES]}
