"""The formatting layer's currency: a Line is a tuple of (text, Rich style) segments, a Cell
is a Line or a plain text. Every text in them is `Safe` (text.safe): made by the one
sanitiser, so nothing a run says reaches a widget without passing it (the widgets take only
these types; mypy refuses a plain str). `seg`, `line` and `cell` are the ways in. Tuples
compare cheaply, so widgets diff them without building Rich objects. Pure; used on the UI
thread.
"""
from __future__ import annotations

from rich.cells import cell_len, set_cell_size

from mpwatch.text.safe import Safe, clean

Seg = tuple[Safe, str]  # (text, Rich style; "" for the widget's own)
Part = tuple[str, str]  # a segment being built, its text not through the sanitiser yet (line() takes it)
Line = tuple[Seg, ...]
Cell = Safe | Line
# Where a text was cut: "…", or the ASCII glyph set's "~" (one TUI a process: its App sets it).
ELLIPSIS = {"mark": "…"}
BLANK = clean("")


def seg(text: str, style: str = "") -> Seg:
    """A segment: its text through the sanitiser."""
    return (clean(text), style)


def line(*parts: Part) -> Line:
    """A line of (text, style) parts, each text through the sanitiser."""
    return tuple((clean(t), s) for t, s in parts)


def cell(text: str) -> Safe:
    """A plain cell (one text, the widget's own style), through the sanitiser."""
    return clean(text)


def lines(text: str, style: str = "") -> list[Line]:
    """A text of several lines (a dump, a note with a second line), one Line each."""
    return [(seg(t, style),) for t in text.split("\n")]


def restyle(line: Line, style: str) -> Line:
    """The line's texts in one style (the replay's events after its cursor: dim)."""
    return tuple((t, style) for t, _ in line)


def use_ellipsis(mark: str) -> None:
    """The App's glyph set's ellipsis, for every cut from now on (tui.render.glyphs)."""
    ELLIPSIS["mark"] = mark


def plain(line: Cell) -> str:
    return line if isinstance(line, str) else "".join(t for t, _ in line)


def width(line: Line) -> int:
    return sum(cell_len(t) for t, _ in line)


def cut(line: Line, room: int, ellipsis: str | None = None) -> Line:
    """The line cut to `room` cells, an ellipsis where something was cut."""
    if width(line) <= room:
        return line
    ellipsis = ELLIPSIS["mark"] if ellipsis is None else ellipsis
    out: list[Seg] = []
    left = max(room - cell_len(ellipsis), 0)
    for text, style in line:
        n = cell_len(text)
        if n <= left:
            out.append((text, style))
            left -= n
            continue
        if left > 0:
            out.append(seg(set_cell_size(text, left), style))
        break
    out.append(seg(ellipsis, "bright_black"))
    return tuple(out)


def wrap(line: Line, room: int, indent: int = 0) -> list[Line]:
    """The line in as many lines of `room` cells as it takes, broken at spaces where it can
    (a word longer than a line is broken where the line ends); the lines after the first
    indented by `indent`. Nothing is cut: a finding is read whole."""
    out: list[Line] = []
    cur: list[Seg] = []
    left = room
    for text, style in line:
        for word in _words(text):
            n = cell_len(word)
            if n > left and cur and word.strip():
                out.append(_rstrip(cur))
                cur, left = [seg(" " * indent)] if indent else [], room - indent
                word = word.lstrip(" ")
                n = cell_len(word)
            while n > left > 0 and word:  # a word longer than a whole line
                head = set_cell_size(word, left)
                cur.append(seg(head, style))
                out.append(_rstrip(cur))
                cur, left = [seg(" " * indent)] if indent else [], room - indent
                word = word[len(head):]
                n = cell_len(word)
            if word:
                cur.append(seg(word, style))
                left -= n
    if cur or not out:
        out.append(_rstrip(cur))
    return out


def _words(text: str) -> list[str]:
    """The text in words, each with the spaces before it (so joining them gives the text)."""
    out: list[str] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or (text[i] == " " and text[i - 1] != " "):
            out.append(text[start:i])
            start = i
    return out


def _rstrip(segs: list[Seg]) -> Line:
    if segs and segs[-1][0].endswith(" "):
        segs = [*segs[:-1], seg(segs[-1][0].rstrip(" "), segs[-1][1])]
    return tuple(s for s in segs if s[0])


def pad(text: str, n: int, right: bool = False) -> Safe:
    """`text` cut or padded to exactly n cells."""
    text = clean(text)
    size = cell_len(text)
    if size > n:
        return clean(set_cell_size(text, n))
    return clean(" " * (n - size) + text if right else text + " " * (n - size))
