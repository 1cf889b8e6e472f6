"""How scrollbars are drawn, through Textual's own hook (ScrollBar.renderer, set by the App);
UI thread.

- A horizontal thumb ends on a whole cell: Textual ends it with an eighth block (▉ ▊ ...) in
  the thumb's colour on the track, and under the worker table or a log that block was all a
  terminal of few colours (or a screen read as text) showed: a lone ▉ in mid-screen.
  Vertical thumbs keep their eighth blocks: at the screen's right edge they read as a bar.
- A terminal that shows ASCII only (LANG=C, MPWATCH_ASCII=1) gets whole cells both ways.
"""
from __future__ import annotations

from typing import ClassVar

from textual.scrollbar import ScrollBarRender


class WholeCellScrollBarRender(ScrollBarRender):
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8


class AsciiScrollBarRender(ScrollBarRender):
    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8
