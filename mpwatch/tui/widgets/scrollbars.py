"""Scrollbars for a terminal that shows ASCII only (LANG=C, MPWATCH_ASCII=1): Textual draws a
thumb's ends with eighth blocks (▉ ▌ ▁ ...); these draw whole cells, in the bar's colours.
Installed through Textual's own hook (ScrollBar.renderer) by the App; UI thread."""
from __future__ import annotations

from typing import ClassVar

from textual.scrollbar import ScrollBarRender


class AsciiScrollBarRender(ScrollBarRender):
    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8
