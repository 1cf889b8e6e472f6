"""Numbers read from outside text: a worker's stderr (torch's and NCCL's words), py-spy's and
torch's analyzer's output, a control request's target, a file's name, an environment variable.
Only ASCII digits are digits here (str.isdigit() and a str pattern's \\d take '²' and '٣', which
int() then refuses or reads as 3), and a number is read only within a count of digits: int() of
a digit string is quadratic past a few thousand digits, and Python refuses one of 4,300 unless
the environment turns its limit off. A number past the bound is no number (None), never an
exception. The patterns (INT, DECIMAL) are for a caller's own regular expressions, so that what
they capture is always safe to convert. Pure; any thread; stdlib only.
"""
from __future__ import annotations

import re

INT_DIGITS = 18  # < 10**18 < 2**63: a pid, a rank, a count, a size in bytes
INT = r"[0-9]{1,18}"  # INT_DIGITS ASCII digits, for a caller's pattern
DECIMAL = r"[0-9]{1,15}(?:\.[0-9]{1,15})?"  # a decimal a float holds near exactly: 2.00, 79.15
_DECIMAL = re.compile(DECIMAL)


def int_of(text: object, digits: int = INT_DIGITS, signed: bool = False) -> int | None:
    """The integer `text` spells in ASCII digits alone (a leading '-' when signed), at most
    `digits` of them; else None (a '²', a space, a '+', 5,000 digits, anything not a str)."""
    if not isinstance(text, str):
        return None
    body = text[1:] if signed and text[:1] == "-" else text
    if not 0 < len(body) <= digits or not body.isascii() or not body.isdigit():  # ASCII: 0-9 alone
        return None
    return int(text)


def decimal_of(text: object) -> float | None:
    """A decimal as DECIMAL spells it (ASCII, at most 15 digits each side of the point), else None."""
    if not isinstance(text, str) or len(text) > 31 or _DECIMAL.fullmatch(text) is None:
        return None
    return float(text)
