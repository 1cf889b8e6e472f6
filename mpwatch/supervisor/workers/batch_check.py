"""A BATCH checked where it enters the supervisor: its reports (each one typed and within the
bounds of contract.protocol: MAX_METRICS_ACCEPTED...), its CUDA view and its CUDA OOM records. The
supervisor's side of the wire format only: the worker side never loads it. Runs on the channel hub's threads
(supervisor.workers.ledger calls it, on the hot path: exact type checks, one pass).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from mpwatch.contract import (
    MAX_EXACT,
    MAX_METRIC_NAME,
    MAX_METRIC_TEXT,
    MAX_METRICS_ACCEPTED,
    OOM_MAX,
    OOM_MESSAGE_MAX,
    BadFrame,
    CudaView,
    OomRecord,
    as_float,
    as_number,
)

PATH_MAX = 4096  # characters of a snapshot's path
# What a rank declares over its run, bounded here whatever its worker side does (issue 39): the
# names it keeps of its phases and metrics (the first ones; later ones past the count are left
# out, and said), each a printable name (so valid UTF-8) of at most so many characters.
PHASES_KEPT = 32
PHASE_NAME_MAX = 64
METRICS_KEPT = 256
WHY_MAX = 300  # characters of why a snapshot was not written


class Report(NamedTuple):
    """A checked report of a BATCH (the supervisor's side: the worker sends plain lists)."""

    ts: float  # the worker's wall clock
    step: int | None
    loss: float | None
    metrics: dict[str, Any]
    n: int  # how many report() calls the entry stands for


def validate_batch(msg: dict[str, Any], rejected: list[str] | None = None) -> list[Report]:
    """Checked reports of a BATCH frame: a list of (ts, step, loss, metrics, n), n being how
    many report() calls the entry stands for. On the supervisor's hot path, so exact type
    checks (bool is not int here) and one pass. A frame that is no batch is a BadFrame; a
    report that is not one, or past the bounds (MAX_METRICS_ACCEPTED...), too, unless `rejected` is
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
    # The common shape first, as a worker's sender makes it: [ts, step, loss, {}, n] (or without n).
    if type(item) is list and 4 <= len(item) <= 5:
        ts, step, loss, metrics, *more = item
        if (type(ts) is float and type(step) is int and type(loss) is float and type(metrics) is dict
                and not metrics and (not more or (type(more[0]) is int and more[0] >= 1))):
            return Report._make((ts, step, loss, metrics, more[0] if more else 1))
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
    if metrics and (len(metrics) > MAX_METRICS_ACCEPTED or not all(map(_fair_metric, metrics.items()))):
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
    if len(metrics) > MAX_METRICS_ACCEPTED:
        return f"report has {len(metrics)} metrics (at most {MAX_METRICS_ACCEPTED})"
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
    """A BATCH's `cuda` (the worker's allocator view, contract.cuda_view.CudaView), or None when
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


def _size(raw: dict[str, Any], key: str) -> int | None:
    v = raw.get(key)
    return v if type(v) is int and 0 <= v <= MAX_EXACT else None


def _text(raw: dict[str, Any], key: str, most: int) -> str | None:
    v = raw.get(key)
    return v[:most] if isinstance(v, str) else None


def validate_oom(raw: object) -> list[OomRecord]:
    """A BATCH's `oom` (the worker's CUDA OOM records, contract.cuda_view.OomRecord): at most
    OOM_MAX, every field checked (a wrong one is None: not known), texts cut; one without a
    positive `seq` is left out."""
    if type(raw) is not list:
        return []
    out: list[OomRecord] = []
    for r in raw[:OOM_MAX]:
        if not isinstance(r, dict) or type(r.get("seq")) is not int or r["seq"] < 1:
            continue
        out.append({"seq": r["seq"], "ts": as_float(r.get("ts")) or 0.0, "device": _size(r, "device"),
                    "uuid": _text(r, "uuid", 96), "alloc": _size(r, "alloc"), "total": _size(r, "total"),
                    "free": _size(r, "free"), "allocated": _size(r, "allocated"),
                    "reserved": _size(r, "reserved"), "inactive_split": _size(r, "inactive_split"),
                    "snapshot": _text(r, "snapshot", PATH_MAX),
                    "snapshot_error": _text(r, "snapshot_error", WHY_MAX),
                    "message": _text(r, "message", OOM_MESSAGE_MAX)})
    return out


def _new_name(k: object, most: int) -> bool:
    return type(k) is str and 0 < len(k) <= most and k.isprintable()


def keep_phases(raw: dict[Any, Any], known: set[str]) -> tuple[dict[str, float], int]:
    """A batch's phase totals within the rank's bounds: of the names it has declared (`known`,
    which takes a new one while it holds fewer than PHASES_KEPT, each printable and at most
    PHASE_NAME_MAX characters), each total a number; and how many were left out. One pass."""
    out: dict[str, float] = {}
    left = 0
    for k, v in raw.items():
        f = as_number(v)
        if f is not None and (k in known or (len(known) < PHASES_KEPT and _new_name(k, PHASE_NAME_MAX))):
            known.add(k)
            out[k] = f
        else:
            left += 1
    return out, left


def keep_metrics(into: dict[str, Any], new: dict[str, Any]) -> int:
    """`new` merged into `into` (later values win) but for names past METRICS_KEPT in all, or not
    printable (the names `into` has stay); how many were left out."""
    left = 0
    for k, v in new.items():
        if k in into or (len(into) < METRICS_KEPT and _new_name(k, MAX_METRIC_NAME)):
            into[k] = v
        else:
            left += 1
    return left
