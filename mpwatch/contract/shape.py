"""Whether a JSON value has the shape a schema (contract.status's TypedDicts) says: for what
comes from outside this process and is then read field by field (a final.json read back, a
status from another machine's bridge), so that a file damaged, crafted, or written by another
mpwatch is refused whole with the reason, never a KeyError deep in a reader. Extra keys are
allowed (a newer producer); a missing key, a wrong type or a value outside a Literal or an
enum is a problem. A float field takes an int, and the strings JSON spells non-finite floats
as (contract.coerce.NON_FINITE). A supervisor's own statuses are not checked (its tests
check them against the schema). Pure; any thread.
"""
from __future__ import annotations

import enum
import sys
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, is_typeddict

from mpwatch.contract.coerce import NON_FINITE

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - 3.10
    from typing_extensions import NotRequired

_HINTS: dict[type, dict[str, tuple[Any, bool]]] = {}  # TypedDict -> {key: (type, required)}
SHAPE_DEPTH = 16


def _fields(td: type) -> dict[str, tuple[Any, bool]]:
    got = _HINTS.get(td)
    if got is None:
        got = {}
        for key, hint in typing.get_type_hints(td, include_extras=True).items():
            required = get_origin(hint) is not NotRequired
            got[key] = (get_args(hint)[0] if not required else hint, required)
        _HINTS[td] = got
    return got


def problem(value: object, schema: Any, where: str = "status", depth: int = 0) -> str | None:
    """None when value has schema's shape, else what is wrong and where ("status.run.counts: missing")."""
    if depth > SHAPE_DEPTH:
        return f"{where}: nested too deep"
    if schema is Any or schema is object:
        return None
    if schema is None or schema is type(None):
        return None if value is None else f"{where}: not null"
    origin = get_origin(schema)
    if origin is Union or origin is types.UnionType:
        wrong = [problem(value, arm, where, depth + 1) for arm in get_args(schema)]
        return None if None in wrong else next(w for w in wrong if w is not None)
    if origin is Literal:
        return (None if value in get_args(schema)
                else f"{where}: {value!r} is none of {list(get_args(schema))}")
    if origin is list:
        if not isinstance(value, list):
            return f"{where}: not a list"
        (item,) = get_args(schema)
        return next((p for i, v in enumerate(value)
                     if (p := problem(v, item, f"{where}[{i}]", depth + 1))), None)
    if origin is dict:
        if not isinstance(value, dict):
            return f"{where}: not an object"
        _, item = get_args(schema)
        return next((p for k, v in value.items() if (p := problem(v, item, f"{where}.{k}", depth + 1))), None)
    if is_typeddict(schema):
        return _record(value, schema, where, depth)
    return _scalar(value, schema, where)


def _record(value: object, schema: type, where: str, depth: int) -> str | None:
    if not isinstance(value, dict):
        return f"{where}: not an object"
    for key, (hint, required) in _fields(schema).items():
        if key not in value:
            if required:
                return f"{where}.{key}: missing"
            continue
        p = problem(value[key], hint, f"{where}.{key}", depth + 1)
        if p is not None:
            return p
    return None


def _scalar(value: object, schema: Any, where: str) -> str | None:
    if isinstance(schema, type) and issubclass(schema, enum.Enum):
        return None if value in {m.value for m in schema} else f"{where}: {value!r} is no {schema.__name__}"
    if schema is bool:
        ok = isinstance(value, bool)
    elif schema is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif schema is float:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) or value in NON_FINITE
    elif schema is str:
        ok = isinstance(value, str)
    else:
        return None  # a type this checker does not know: not refused
    return None if ok else f"{where}: {type(value).__name__} {_short(value)} where {schema.__name__} belongs"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
