"""JSON from outside read within bounds: a channel's frame, a control request, the bridge's
wire, a run file's line. Every read returns a value or raises ValueError (never RecursionError,
never a number no reader can use), in time linear in its size:

- nesting: at most MAX_DEPTH arrays and objects deep, checked before json's parser (which
  recurses once a level) sees the text: a line of 100,000 `[` is refused at once;
- integers: at most FRAME_INT_DIGITS digits are converted (int() of a digit string is quadratic;
  Python's own limit can be turned off by the user's environment); past that a frame is bad
  and a run file reads null;
- text: UTF-8 (a frame that is not is bad; a run file's bytes that are not read as U+FFFD).

`loads` is the frames' reading (NaN, Infinity and 1e999 as Python reads them: the frame's
checkers refuse them where they matter); `loads_strict` the run files' (NaN, Infinity and any
number too big for a float read as null: a timestamp or a count is then unknown, never
infinite). The scan and the frames' reading live in contract.protocol (a training process loads
that module alone); this module adds the files' strict reading. Pure; stdlib only.
"""
from __future__ import annotations

import json
import math

from mpwatch.contract import protocol
from mpwatch.contract.protocol import FRAME_INT_DIGITS, MAX_DEPTH, TooDeep, depth_within, loads

__all__ = ["FILE_INT_DIGITS", "FRAME_INT_DIGITS", "MAX_DEPTH", "TooDeep", "depth_within", "loads",
           "loads_strict"]
FILE_INT_DIGITS = 308  # a run file's integer of more digits reads null: every one read fits a float


def _file_int(text: str) -> int | None:
    return int(text) if protocol.digits(text) <= FILE_INT_DIGITS else None


def _file_float(text: str) -> float | None:
    f = float(text)  # linear in its length, whatever it is
    return f if math.isfinite(f) else None


_FILE = json.JSONDecoder(parse_int=_file_int, parse_float=_file_float, parse_constant=lambda _name: None)


def loads_strict(data: bytes | bytearray | str) -> object:
    """A run file's JSON value, within the bounds, read strictly (NaN, Infinity, 1e999 and
    integers of more than FILE_INT_DIGITS digits are null); ValueError says why not."""
    return protocol.bounded(_FILE, data, "replace")
