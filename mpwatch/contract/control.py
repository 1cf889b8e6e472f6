"""Control's records: the status's tunables and checkpoint requests, a rank's stop signal,
the BATCH `live` entries checked where they enter the supervisor, and a tunable's value read
from a command line (`mpwatch ctl set`, the TUI's `t`). contract.status re-exports the records.
Pure; any thread. The worker side (worker.control) never imports this module: `typing` is dear there.
"""
from __future__ import annotations

import math
from typing import Literal, NamedTuple, TypedDict, cast

from mpwatch.contract import protocol

TunableType = Literal["int", "float", "str", "bool"]
TunableValue = int | float | str | bool
TUNABLE_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class RankAnswer(TypedDict):
    """A rank's answer to a request: the step it took effect at (None: the process had
    reported no step), and whether that was past the step asked for."""

    rank: int
    step: int | None
    late: bool


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


class TunableStatus(TypedDict):
    """A value the training loop reads with mpwatch.tunable(NAME, DEFAULT)."""

    name: str
    type: TunableType
    default: TunableValue
    value: TunableValue  # the run's value now: the last change's, else the default
    ranks: list[int]  # the ranks that declared it
    changes: list[TunableChange]  # the last few, oldest first


class CheckpointRequest(TypedDict):
    """A "checkpoint now" (`mpwatch ctl checkpoint`, the TUI's `c`), and what each rank did."""

    id: int
    ts: float
    by: str
    step: int | None  # the step it is taken at on every rank; None: at each rank's next call
    ranks: list[int]  # the ranks asked
    answers: list[RankAnswer]
    waiting: list[int]
    missed: list[int]  # ranks whose process ended before they answered


class StopInfo(TypedDict):
    """The stop signal mpwatch sent a rank's process (--stop-signal), while it has not ended."""

    signal: str  # "SIGTERM", "SIGUSR2", ...
    sent: float  # wall clock
    kill_in: float | None  # seconds until SIGKILL to everything of the rank, at the status's moment


# ------------------------------------------------------------ BATCH `live` entries ----
class Declared(NamedTuple):
    name: str
    type: TunableType
    default: TunableValue


class Done(NamedTuple):
    id: int
    step: int | None
    late: bool


ControlEntry = Declared | Done | Literal["polls"]


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


def validate_control(raw: object) -> list[ControlEntry]:
    """A BATCH's `live` list, checked: anything unexpected is a protocol.BadFrame."""
    if type(raw) is not list or len(raw) > 4096:
        raise protocol.BadFrame("live is not a list of entries")
    out: list[ControlEntry] = []
    for e in raw:
        if type(e) is not list or not e:
            raise protocol.BadFrame("a live entry is not a list")
        kind = e[0]
        if kind == protocol.LIVE_POLLS:
            out.append("polls")
        elif kind == protocol.LIVE_DECLARE and len(e) == 4:
            _, name, tname, default = e
            value = value_of(tname, default) if type(tname) is str else None
            if check_name(name) is not None or value is None:
                raise protocol.BadFrame("a tunable declaration of the wrong shape")
            out.append(Declared(name, cast(TunableType, tname), value))
        elif kind == protocol.LIVE_DONE and len(e) == 4:
            _, rid, step, late = e
            if type(rid) is not int or (step is not None and type(step) is not int) or type(late) is not bool:
                raise protocol.BadFrame("a request's answer of the wrong shape")
            out.append(Done(rid, step, late))
        else:
            raise protocol.BadFrame(f"unknown live entry {str(kind)[:40]!r}")
    return out


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
