"""A JSON value checked against contract.status's TypedDicts, and the shape of one (its keys and
the kinds of its values, recursively), for the tests that keep recorded data from drifting
(tests/test_recordings.py).

Works from Python 3.10 (the README's floor): there NotRequired and the evaluation of the
schema's string annotations come from typing_extensions (a dependency below 3.11).
"""
from __future__ import annotations

import enum
import re
import sys
import types
import typing
from collections.abc import Iterable
from typing import Any

from mpwatch.contract import NON_FINITE

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required, get_args, get_origin, get_type_hints, is_typeddict
else:  # pragma: no cover - Python 3.10
    from typing import get_args, get_origin

    from typing_extensions import NotRequired, Required, get_type_hints, is_typeddict

_UNIONS = (typing.Union, types.UnionType)


def fields(tp: Any) -> dict[str, tuple[Any, bool]]:
    """A TypedDict's keys: key -> (its type, whether every status carries it)."""
    out = {}
    for key, hint in get_type_hints(tp, include_extras=True).items():
        required = get_origin(hint) is not NotRequired
        if get_origin(hint) in (NotRequired, Required):
            hint = get_args(hint)[0]
        out[key] = (hint, required)
    return out


def problems(value: Any, tp: Any, path: str = "status") -> list[str]:
    """What of value does not fit tp (a contract.status type), one line each; [] when it fits."""
    if tp is Any:
        return []
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object ({tp.__name__})"]
        out = []
        schema = fields(tp)
        for key, (hint, required) in schema.items():
            if key in value:
                out += problems(value[key], hint, f"{path}.{key}")
            elif required:
                out.append(f"{path}.{key}: missing ({tp.__name__} always has it)")
        out += [f"{path}.{key}: not in contract.status ({tp.__name__})" for key in value if key not in schema]
        return out
    origin, args = get_origin(tp), get_args(tp)
    if origin in _UNIONS:
        tries = [problems(value, arg, path) for arg in args]
        return [] if any(not t for t in tries) else min(tries, key=len)
    if origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r} is none of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, not a list"]
        return [p for i, v in enumerate(value) for p in problems(v, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        return [p for k, v in value.items() for p in problems(v, args[1], f"{path}[{k!r}]")]
    return _leaf(value, tp, path)


def _leaf(value: Any, tp: Any, path: str) -> list[str]:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):  # a State travels as its value
        ok = value in {m.value for m in tp}
    elif tp is type(None):
        ok = value is None
    elif tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:  # JSON has no float type of its own; a non-finite one is spelled out
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) or value in NON_FINITE
    elif isinstance(tp, type):
        ok = isinstance(value, tp)
    else:
        return [f"{path}: the checker does not know the type {tp!r}"]
    return [] if ok else [f"{path}: {value!r} is not {getattr(tp, '__name__', tp)}"]


# ------------------------------------------------------------------- shapes ----
def kind(value: Any) -> str:
    """A value's kind as JSON has it (int and float are one: a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)) or value in NON_FINITE:
        return "number"
    return {str: "str", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def shape(value: Any, path: str = "", out: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Every path in value -> the kinds of value seen there. A list's items share one path
    (`workers[]`); items of a list that carry a `kind` or an `event` are told apart by it
    (`alerts[kind=hang]`), so each kind of alert has its own keys. The keys of a dict that maps
    data (states, metric names, values N/A: DATA_KEYED) are one path (`run.counts{}`)."""
    out = {} if out is None else out
    out.setdefault(path, set()).add(kind(value))
    if isinstance(value, dict):
        data = path.rsplit(".", 1)[-1] in DATA_KEYED
        for k, v in value.items():
            shape(v, f"{path}{{}}" if data else f"{path}.{k}" if path else k, out)
    elif isinstance(value, list):
        for v in value:
            tag = next((f"{name}={v[name]}" for name in ("kind", "event")
                        if isinstance(v, dict) and isinstance(v.get(name), str)), "")
            shape(v, f"{path}[{tag}]", out)
    return out


def _data_keyed() -> frozenset[str]:
    """contract.status's fields typed dict[str, ...] (X | None too): their keys are data (states,
    metric names, phases), never the schema's. Read from the schema: a list kept by hand here lacked
    Pace.relative, whose phases are there only once a rank has peers to be compared with (a fresh
    recording read as drift where the run was slower to pace its ranks)."""
    from mpwatch.contract import status

    out = set()
    for tp in vars(status).values():
        if not is_typeddict(tp):
            continue
        for key, (hint, _) in fields(tp).items():
            if get_origin(hint) in (types.UnionType, typing.Union):
                args = [a for a in get_args(hint) if a is not type(None)]
                hint = args[0] if len(args) == 1 else hint
            if get_origin(hint) is dict and get_args(hint)[0] is str:
                out.add(key)
    return frozenset(out)


DATA_KEYED = _data_keyed()  # counts, errors, metrics, phases, relative


def drift(fresh: dict[str, set[str]], stored: dict[str, set[str]]) -> list[str]:
    """Paths one shape has and the other lacks (the topmost of each: not every key under a
    missing object), and paths whose kinds disagree (null aside: a value unknown in one run
    may be known in another, and so are its keys: under a path one shape only ever saw null,
    such as a pace a shorter run had not made yet, nothing is compared)."""
    out = [f"+ {p}: {sorted(fresh[p])} (the supervisor sends it, the recording lacks it)"
           for p in _topmost(fresh.keys() - stored.keys() - _under_null(fresh.keys(), stored))]
    out += [f"- {p}: {sorted(stored[p])} (the recording has it, the supervisor no longer sends it)"
            for p in _topmost(stored.keys() - fresh.keys() - _under_null(stored.keys(), fresh))]
    for p in sorted(fresh.keys() & stored.keys()):
        a, b = fresh[p] - {"null"}, stored[p] - {"null"}
        if a and b and not a & b:
            out.append(f"~ {p}: {sorted(b)} recorded, {sorted(a)} now")
    return out


def _under_null(paths: Iterable[str], other: dict[str, set[str]]) -> set[str]:
    """The paths of which `other` knows nothing, so that nothing is compared: under one it only
    ever saw null, under a list or a data-keyed dict it only ever saw empty (no outsider took the
    machine while it was recorded; a pace not yet compared with the other ranks'), and the items of a kind it never saw (an alert kind one run raised and the other not:
    which findings a run has is its own business; each kind's keys are compared where both have it)."""
    paths = list(paths)
    unknown = [q for q, kinds in other.items()
               if kinds == {"null"} or ("list" in kinds and kinds <= {"list", "null"}
                                        and not any(k.startswith(q + "[") for k in other))
               or ("object" in kinds and kinds <= {"object", "null"} and q.rsplit(".", 1)[-1] in DATA_KEYED
                   and q + "{}" not in other)]
    out = {p for p in paths for q in unknown if p.startswith(q) and p[len(q):len(q) + 1] in (".", "[", "{")}
    for p in paths:
        for tagged in re.finditer(r"\[(?:kind|event)=[^\]]*\]", p):
            prefix = p[:tagged.end()]
            if not any(k.startswith(prefix) for k in other):
                out.add(p)
                break
    return out


def _topmost(paths: set[str]) -> list[str]:
    return [p for p in sorted(paths) if not any(p != q and p.startswith(q) and p[len(q)] in ".[{" for q in paths)]


def event_drift(now: list[dict], then: list[dict]) -> list[str]:
    """The events of each kind both runs had (which kinds happen is the run's own business): a key
    every event of the kind carries in one run and none in the other, and the kinds of values under
    the keys both had. A key only some events carry (an alert's `update`: whether the finding learnt
    more while the run was recorded) is no sign either way."""
    found = []
    for kind in sorted({e["event"] for e in now} & {e["event"] for e in then}):
        a, b = ([e for e in evs if e["event"] == kind] for evs in (now, then))
        always_a, any_a = set.intersection(*map(set, a)), set().union(*map(set, a))
        always_b, any_b = set.intersection(*map(set, b)), set().union(*map(set, b))
        found += [f"+ events[event={kind}].{k} (the supervisor sends it, the recording lacks it)"
                  for k in sorted(always_a - any_b)]
        found += [f"- events[event={kind}].{k} (the recording has it, the supervisor no longer sends it)"
                  for k in sorted(always_b - any_a)]
        both = any_a & any_b
        found += drift(shape([{k: v for k, v in e.items() if k in both} for e in a], "events"),
                       shape([{k: v for k, v in e.items() if k in both} for e in b], "events"))
    return found


def statuses(rec: dict) -> dict[str, dict]:
    """Every status a recording holds, by where it is in it."""
    out = {"status": rec["status"]}
    out.update({f"node_statuses[{i}]": st for i, st in enumerate(rec.get("node_statuses", []))})
    if "lost" in rec:
        out["lost.status"] = rec["lost"]["status"]
    if "final" in rec:
        out["final"] = rec["final"]
    return out


def recording_drift(fresh: dict, stored: dict) -> list[str]:
    """How a fresh recording's statuses and events differ in shape from the stored one's (none: no drift)."""
    now, then = statuses(fresh), statuses(stored)
    if set(now) != set(then):
        return [f"the statuses held: {sorted(now)} now, {sorted(then)} recorded"]
    return [d for where in then for d in drift(shape(now[where], where), shape(then[where], where))] + \
        event_drift(fresh["events"], stored["events"])
