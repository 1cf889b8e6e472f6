"""The live requests' records (what goes down the workers' channels at a step, docs/control.md): the
status's tunables (the actions' requests, checkpoints among them, are contract.actions'), the
BATCH `live` entries checked where they enter the supervisor, and a tunable's value read from a
command line (`mpwatch ctl set`, the TUI's `t`).
Pure; any thread. The worker side (worker.control) never imports this module: `typing` is dear there.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, TypedDict, TypeVar, cast

from mpwatch.contract import protocol
from mpwatch.contract.actions import (
    ACTIONS,
    CHECKPOINT,
    MEMORY,
    PROFILE,
    ActionRequest,
    CheckpointRequest,
    MemoryRequest,
    ProfileRequest,
    RankAnswer,
)
from mpwatch.contract.coerce import NON_FINITE

TunableType = Literal["int", "float", "str", "bool"]
TunableValue = int | float | str | bool
TUNABLE_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
_Status = TypeVar("_Status", bound=Mapping[str, object])  # a status: contract.status imports this module


class TunableChange(TypedDict):
    """One change of a tunable."""

    id: int
    ts: float  # wall clock of the request
    value: TunableValue
    old: TunableValue
    step: int | None  # the step it takes effect at on every rank; None: at each rank's next call
    by: str  # who asked: "ctl", "tui", with the user and host
    answers: list[RankAnswer]
    waiting: list[int]  # ranks asked that have not applied it yet
    # not in force yet: its step is ahead of a rank asked (the ranks answer as they reach it;
    # in force once every rank asked has, see supervisor.live.records)
    pending: bool


class TunableStatus(TypedDict):
    """A value the training loop reads with mpwatch.tunable(NAME, DEFAULT)."""

    name: str
    type: TunableType
    default: TunableValue
    value: TunableValue  # the value in force: the last change that came into force, else the default
    ranks: list[int]  # the ranks that declared it
    changes: list[TunableChange]  # the last few, oldest first (the pending ones among them)


def pending_changes(t: TunableStatus) -> list[TunableChange]:
    """A tunable's changes not in force yet, oldest first (a status of an older mpwatch has none)."""
    return [c for c in t["changes"] if c.get("pending")]


def in_force(t: TunableStatus) -> TunableChange | None:
    """The change whose value is in force (None: the default is)."""
    done = [c for c in t["changes"] if not c.get("pending") and c["value"] == t["value"]]
    return done[-1] if done else None


class LiveView(NamedTuple):
    """The live requests' part of a status (the live room's, one folded from a run's events, several
    nodes' joined): the tunables, and each action's requests (contract.actions.record's)."""

    tunables: list[TunableStatus]
    requests: dict[str, list[ActionRequest]]  # by action name (contract.actions.ACTIONS), oldest first

    def into(self, st: _Status) -> _Status:
        """`st` with each action's list under its key: an `always` one's (the checkpoints') in
        every status, the others' once one was asked (so no recording drifts)."""
        lists = {a.key: self.requests.get(a.name, []) for a in ACTIONS.values()
                 if a.always or self.requests.get(a.name)}
        cast(dict[str, object], st).update(lists)
        return st

    # the typed views of the lists, for the readers that name one
    @property
    def checkpoints(self) -> list[CheckpointRequest]:
        return self.requests.get(CHECKPOINT.name, [])  # a CheckpointRequest is an ActionRequest

    @property
    def profiles(self) -> list[ProfileRequest]:
        return cast(list[ProfileRequest], self.requests.get(PROFILE.name, []))

    @property
    def memory_snapshots(self) -> list[MemoryRequest]:
        return cast(list[MemoryRequest], self.requests.get(MEMORY.name, []))


# ------------------------------------------------------------ BATCH `live` entries ----
class Declared(NamedTuple):
    name: str
    type: TunableType
    default: TunableValue


class Done(NamedTuple):
    id: int
    step: int | None
    late: bool


class Result(NamedTuple):
    """An action's outcome (protocol.LIVE_RESULT): its fields, read by contract.actions."""

    id: int
    fields: dict[str, Any]


LiveEntry = Declared | Done | Result | Literal["polls"]
RESULT_KEYS = 16  # fields a result may carry
RESULT_TEXT = 4096  # characters of one of its strings
RESULT_ROWS = 64  # rows of one of its lists (a profile's top operators), each a short list


def _cell(x: object) -> bool:
    return x is None or type(x) in (bool, int, float) or (isinstance(x, str) and len(x) <= 400)


def _result_value(v: object) -> bool:
    if v is None or type(v) in (bool, int, float):
        return True
    if isinstance(v, str):
        return len(v) <= RESULT_TEXT
    if isinstance(v, list):
        return len(v) <= RESULT_ROWS and all(isinstance(row, list) and len(row) <= 8 and all(map(_cell, row))
                                             for row in v)
    return False


def check_result(raw: object) -> dict[str, Any]:
    """A result's fields, bounded: a small object of plain values; else a protocol.BadFrame."""
    if type(raw) is not dict or len(raw) > RESULT_KEYS:
        raise protocol.BadFrame("a result is not a small object")
    fields = cast(dict[str, Any], raw)
    if not all(type(k) is str and len(k) <= 40 and _result_value(v) for k, v in fields.items()):
        raise protocol.BadFrame("a result's field of the wrong shape")
    return fields


def check_name(name: object) -> str | None:
    """Why `name` cannot be a tunable's name, or None when it can."""
    if type(name) is not str or not 0 < len(name) <= protocol.TUNABLE_NAME_MAX or not name.isprintable():
        return f"a tunable's name is 1 to {protocol.TUNABLE_NAME_MAX} printable characters"
    return None


def value_of(kind: str, value: object) -> TunableValue | None:
    """`value` when it is a value of the tunable type `kind` (an int is a float's), else None."""
    t = TUNABLE_KINDS.get(kind)
    if t is None:
        return None
    if type(value) is t:
        if t is str and len(cast(str, value)) > protocol.TUNABLE_STR_MAX:
            return cast(str, value)[:protocol.TUNABLE_STR_MAX]
        if t is float and not math.isfinite(cast(float, value)):
            return None
        return cast(TunableValue, value)
    if t is float and type(value) is int:
        return float(value)  # an int (checked above)
    return None


REFUSED_KEPT = 8  # a rank's refused tunable declarations its status lists: the first, one per name


def keep_refused(kept: list[str], refusal: str) -> bool:
    """A rank's refused declaration ("NAME: why", validate_live's) added to the ones it keeps
    unless one of that name is there or REFUSED_KEPT are: the supervisor's rule (its status, and
    a tunable_refused event for each added) and the replay's; True when added."""
    name = refusal.partition(":")[0]
    if len(kept) >= REFUSED_KEPT or any(k.partition(":")[0] == name for k in kept):
        return False
    kept.append(refusal)
    return True


def validate_live(raw: object, refused: list[str] | None = None) -> list[LiveEntry]:
    """A BATCH's `live` list, checked: anything unexpected is a protocol.BadFrame, but for a
    tunable's declaration that cannot be kept (a default that is not finite, a bad name) when
    `refused` is given: that one alone is left out and "NAME: why" added there, so the
    tunables declared beside it are kept."""
    if type(raw) is not list or len(raw) > 4096:
        raise protocol.BadFrame("live is not a list of entries")
    out: list[LiveEntry] = []
    for e in raw:
        if type(e) is not list or not e:
            raise protocol.BadFrame("a live entry is not a list")
        kind = e[0]
        if kind == protocol.LIVE_POLLS:
            out.append("polls")
        elif kind == protocol.LIVE_DECLARE and len(e) == 4:
            _, name, tname, default = e
            why = check_name(name) or _bad_default(tname, default)
            if why is None:
                value = cast(TunableValue, value_of(tname, default))
                out.append(Declared(name, cast(TunableType, tname), value))
            elif refused is None:
                raise protocol.BadFrame("a tunable declaration of the wrong shape")
            else:
                refused.append(f"{name if check_name(name) is None else '?'}: {why}")
        elif kind == protocol.LIVE_DONE and len(e) == 4:
            _, rid, step, late = e
            if type(rid) is not int or (step is not None and type(step) is not int) or type(late) is not bool:
                raise protocol.BadFrame("a request's answer of the wrong shape")
            out.append(Done(rid, step, late))
        elif kind == protocol.LIVE_RESULT and len(e) == 3:
            if type(e[1]) is not int:
                raise protocol.BadFrame("a result of the wrong shape")
            out.append(Result(e[1], check_result(e[2])))
        else:
            raise protocol.BadFrame(f"unknown live entry {str(kind)[:40]!r}")
    return out


def _bad_default(tname: object, default: object) -> str | None:
    """Why `default` cannot be the default of a tunable of type `tname`; None when it can."""
    if type(tname) is not str or tname not in TUNABLE_KINDS:
        return f"no tunable type {str(tname)[:20]!r} (int, float, str or bool)"
    if value_of(tname, default) is not None:
        return None
    if tname == "float" and (default in NON_FINITE or type(default) is float):
        return f"a float tunable's default must be finite, not {str(default)[:20]}"
    return f"a default that is no {tname}"


# ---------------------------------------------------------------- values ----
def parse_value(text: str, kind: str) -> TunableValue:
    """A value typed on a command line, as the tunable's type; ValueError says why not, in
    words for one line."""
    if kind == "str":
        if len(text) > protocol.TUNABLE_STR_MAX:
            raise ValueError(f"a str tunable is at most {protocol.TUNABLE_STR_MAX} characters")
        return text
    word = text.strip()
    if kind == "bool":
        if word.lower() in TRUE_WORDS:
            return True
        if word.lower() in FALSE_WORDS:
            return False
        raise ValueError(f"expected a bool (true/false, 1/0, yes/no, on/off), got {text!r}")
    if kind == "int":
        try:
            return int(word)
        except ValueError:
            raise ValueError(f"expected an int, got {text!r}") from None
    if kind == "float":
        try:
            v = float(word)
        except ValueError:
            raise ValueError(f"expected a float, got {text!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"expected a finite float, got {text!r}")
        return v
    raise ValueError(f"unknown tunable type {kind!r}")


def shown(value: object) -> str:
    """A tunable's value as a person reads it (a str quoted, so "" and " " show)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
