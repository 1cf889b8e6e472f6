"""What the property tests of the parsers feed them (issue 39): text and bytes a run can say,
built from hostile atoms (numbers of hundreds or thousands of digits, digits that are not
ASCII, lone surrogates, C0 and C1 controls and escape sequences, deep nesting, long lists,
UTF-8 cut mid-character) mixed with the words each parser looks for, so that its patterns are
reached, not only missed. Deterministic: every property runs under BUDGET (derandomized, no
example database), so the suite costs the same on every run and in CI."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def budget(examples: int):
    """A property's settings: a fixed number of examples, derandomized, no database, no deadline
    (the machine is shared: a slow example is no failure; the bounds are what is tested)."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


HUGE = ["9" * 320, "1" + "0" * 400, "9" * 5000, "-" + "9" * 320, "1e999", "-1e999", "1" + "0" * 309 + ".5",
        "0." + "0" * 400 + "1", "18446744073709551616", "99999999999999999999"]
NOT_ASCII_DIGITS = ["²", "٣", "１２", "𝟗", "Ⅻ", "⁹⁹"]
CONTROLS = ["\x1b]0;TITLE\x07", "\x1b[2J", "\x1b[31m", "\x00", "\x07", "\x08", "\x7f", "\x85", "\x9b", "\x9d",
            "\r", "\n", "\t", "\u2028", "\ufeff"]
SURROGATES = ["\udcff", "\udc80", "\ud800", "\udfff"]
NESTING = ["[" * 200, "]" * 200, "{" * 100, '{"a":' * 100, "[[[[", "]]]]", "(" * 100]
LONG = ["x" * 5000, " " * 3000, "," * 2000, "[" * 5000 + "]" * 5000]


def atoms(*words: str) -> st.SearchStrategy[str]:
    """One piece: a hostile atom, a word the parser looks for, or any short text."""
    hostile = st.sampled_from(HUGE + NOT_ASCII_DIGITS + CONTROLS + SURROGATES + NESTING + LONG)
    ascii_numbers = st.integers(-(10 ** 20), 10 ** 20).map(str) | st.floats(allow_nan=True).map(str)
    pieces = [hostile, ascii_numbers, st.text(max_size=12)]
    if words:
        pieces.append(st.sampled_from(words))
    return st.one_of(*pieces)


def texts(*words: str, pieces: int = 14) -> st.SearchStrategy[str]:
    """A text of hostile atoms and `words`, joined."""
    return st.lists(atoms(*words), max_size=pieces).map("".join)


def lines(*words: str, n: int = 12) -> st.SearchStrategy[list[str]]:
    """Lines (a log's tail) of such texts, some of them one word alone."""
    return st.lists(texts(*words, pieces=8) | st.sampled_from(words or ("",)), max_size=n)


def cut_utf8(text: str) -> bytes:
    """A text's bytes cut mid-character where it has one to cut (a torn write)."""
    raw = text.encode("utf-8", "surrogatepass")
    at = next((i for i in range(len(raw) - 1, 0, -1) if raw[i] & 0xC0 == 0x80), None)
    return raw[:at] if at is not None else raw


def as_bytes(*words: str) -> st.SearchStrategy[bytes]:
    """Bytes: any, a hostile text's UTF-8 (surrogates passed through), or the same cut mid-character."""
    t = texts(*words)
    return st.one_of(st.binary(max_size=300), t.map(lambda s: s.encode("utf-8", "surrogatepass")), t.map(cut_utf8))


# JSON values with hostile leaves: what a frame, a run file's line or a reply may hold
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 400), 10 ** 400),
                    st.floats(allow_nan=True, allow_infinity=True), texts(pieces=4),
                    st.sampled_from(["nan", "inf", "-inf"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=6)), max_leaves=24)


def nested(depth: int, leaf: str = "1") -> str:
    """A list nested `depth` deep."""
    return "[" * depth + leaf + "]" * depth


# JSON text: valid (from values), nested to a depth around and far past the bounds, long
# lists, or hostile text that is mostly no JSON at all
json_texts = st.one_of(
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.integers(0, 200).map(nested),
    st.sampled_from([nested(100_000), nested(5000, '"\\"]]]"'), "[" * 100_000, "]" * 100_000,
                     '{"a":' * 20_000 + "1" + "}" * 20_000, "[" + ",".join(["1"] * 100_000) + "]",
                     "9" * 5000, "-" + "9" * 1001, "[" + "9" * 400 + "]", "1e999", "[NaN, Infinity, -Infinity]"]),
    texts('"', "[", "]", "{", "}", ":", ",", "\\", '\\"', "null", "true"),
)
