"""Turn the formatting layer's cells (str or (text, style) segments) into Rich Text.

Always Text, never a str: DataTable reads a str as markup, and a worker's stderr line
such as "[rank 0] error" must show as written.
"""
from __future__ import annotations

from rich.text import Text


def to_text(cell, right: bool = False) -> Text:
    justify = "right" if right else None
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, tuple):
        t = Text(no_wrap=True, overflow="ellipsis", justify=justify)
        for seg in cell:
            text, style = seg
            t.append(text, style=style or None)
        return t
    return Text("" if cell is None else str(cell), no_wrap=True, overflow="ellipsis", justify=justify)


def lines_to_text(lines) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        out.append_text(to_text(line))
    return out
