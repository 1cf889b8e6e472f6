"""Turn the formatting layer's cells (str or (text, style) segments) into Rich Text.

Always Text, never a str: DataTable reads a str as markup, and a worker's stderr line
such as "[rank 0] error" must show as written.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from rich.text import Text

from mpwatch.tui.render.segs import Cell


def to_text(cell: Cell | Text | None, right: bool = False) -> Text:
    justify: Literal["right"] | None = "right" if right else None
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, tuple):
        t = Text(no_wrap=True, overflow="ellipsis", justify=justify)
        for seg in cell:
            text, style = seg
            t.append(text, style=style or None)
        return t
    return Text("" if cell is None else str(cell), no_wrap=True, overflow="ellipsis", justify=justify)


def lines_to_text(lines: Iterable[Cell]) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        out.append_text(to_text(line))
    return out
