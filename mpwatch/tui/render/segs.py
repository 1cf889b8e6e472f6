"""The formatting layer's currency: a Line is a tuple of (text, Rich style) segments, a Cell
is a Line or a plain str. Tuples compare cheaply, so widgets diff them without building
Rich objects. Pure; used on the UI thread.
"""
from __future__ import annotations

from rich.cells import cell_len, set_cell_size

Seg = tuple[str, str]  # (text, Rich style; "" for the widget's own)
Line = tuple[Seg, ...]
Cell = str | Line
# Where a text was cut: "…", or the ASCII glyph set's "~" (one TUI a process: its App sets it).
ELLIPSIS = {"mark": "…"}


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
            out.append((set_cell_size(text, left), style))
        break
    out.append((ellipsis, "bright_black"))
    return tuple(out)


def pad(text: str, n: int, right: bool = False) -> str:
    """`text` cut or padded to exactly n cells."""
    size = cell_len(text)
    if size > n:
        return set_cell_size(text, n)
    return " " * (n - size) + text if right else text + " " * (n - size)
