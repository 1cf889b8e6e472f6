"""The gate between the formatting layer and Textual: the one place where text becomes what a
widget draws (Rich Text, a toast, a button's label). It takes only the render layer's types
(tui.render.segs: every text `Safe`, made by text.safe's sanitiser), so what a run says reaches
the terminal only through the sanitiser; a text that is not `Safe` at run time (a value typed
Any on its way) is put through it here too. UI thread.

Always Text, never a str: DataTable and Label read a str as markup, and a worker's stderr line
such as "[rank 0] error" must show as written.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from rich.text import Text
from textual.app import App
from textual.widgets import Button
from textual.widgets.button import ButtonVariant

from mpwatch.text.safe import Safe, clean
from mpwatch.tui.render.segs import Cell

Severity = Literal["information", "warning", "error"]


def as_safe(text: str) -> str:
    """The text as the gate lets it through: a `Safe` as it is; anything else sanitised."""
    return text if type(text) is Safe else clean(text)


def to_text(cell: Cell | None, right: bool = False, cut: bool = True) -> Text:
    """The cell as Rich Text; `cut`: an ellipsis where it is wider than its widget (else the
    widget decides: a log scrolls sideways)."""
    justify: Literal["right"] | None = "right" if right else None
    t = Text(no_wrap=True if cut else None, overflow="ellipsis" if cut else None, justify=justify)
    if isinstance(cell, tuple):
        for text, style in cell:
            t.append(as_safe(text), style=style or None)
    elif cell is not None:
        t.append(as_safe(cell))
    return t


def lines_to_text(lines: Iterable[Cell], wrap: bool = False) -> Text:
    """Lines as one Text; `wrap`: a line longer than the widget goes on under it (a banner)."""
    out = Text(no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        out.append_text(to_text(line))
    return out


def toast(app: App[Any], lines: Iterable[Safe], severity: Severity, timeout: float) -> None:
    """A notification of one or more lines: plain text, never markup (a cause may hold "[/x]")."""
    app.notify("\n".join(as_safe(t) for t in lines), severity=severity, timeout=timeout, markup=False)


def button(label: Cell, id: str, variant: ButtonVariant = "default") -> Button:
    return Button(to_text(label), id=id, variant=variant)
