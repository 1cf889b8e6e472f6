"""The worker table: one row per worker keyed by rank, children folded under it.

A Line-API widget rather than DataTable: DataTable re-renders every visible cell after
any update_cell (its render caches are keyed on a global update count), which at four
snapshots a second of a busy run costs most of a core on a small machine. Here a row
holds its source data (see view.table_rows); its cells are formatted and its line drawn
only when the line is on screen, and cached until that row's data changes. So 256
workers cost what the ~40 visible rows cost. The update API keeps DataTable's names
(add_row / update_row / remove_row / clear), and `apply(rows)` drives them from the diff
plan of mpwatch.tui.render.diff. The cursor stays on the same worker across updates.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from mpwatch.tui.render import diff, segs
from mpwatch.tui.render.segs import ELLIPSIS, Cell
from mpwatch.tui.render.view import Column, RowSource, rank_of_key
from mpwatch.tui.widgets.cell_cache import CellCache
from mpwatch.tui.widgets.cells import as_safe, to_text

PAD = 1  # spaces on each side of a cell
_STYLES: dict[str, Style] = {}


def _style(spec: str | None) -> Style | None:
    if not spec:
        return None
    s = _STYLES.get(spec)
    if s is None:
        s = _STYLES[spec] = Style.parse(spec)
    return s


def _fit(segments: list[tuple[str, Style | None]], width: int, right: bool) -> list[Segment]:
    """Segments cut or padded to exactly `width` cells (an ellipsis where cut)."""
    total = sum(cell_len(t) for t, _ in segments)
    if total > width:
        out, room = [], width - 1
        for text, style in segments:
            n = cell_len(text)
            if n <= room:
                out.append(Segment(text, style))
                room -= n
            else:
                if room > 0:
                    out.append(Segment(set_cell_size(text, room), style))
                break
        out.append(Segment(ELLIPSIS["mark"]))
        return out
    pad = Segment(" " * (width - total))
    body = [Segment(t, s) for t, s in segments]
    return ([pad] + body) if right else (body + [pad])


# (cell, width, right, ellipsis) -> its segments; 1024 a generation: the ~40 rows on screen times
# their columns repeat well within it, and it holds at most ~1.5 MiB.
_FITTED: CellCache[tuple[Cell, int, bool, str], list[Segment]] = CellCache(1024)


def _fitted(cell: Cell, width: int, right: bool) -> list[Segment]:
    """A cell's segments with its padding, cached: most cells (state, pid, rss, blanks...)
    repeat across rows and snapshots, so a redrawn row mostly costs dict lookups."""
    key = (cell, width, right, ELLIPSIS["mark"])
    segs = _FITTED.young.get(key) or _FITTED.get(key)
    if segs is None:
        parts: list[tuple[str, Style | None]] = ([(as_safe(t), _style(s)) for t, s in cell]
                                                 if isinstance(cell, tuple) else [(as_safe(cell), None)])
        segs = [Segment(" " * PAD), *_fit(parts, width, right), Segment(" " * PAD)]
        _FITTED.put(key, segs)
    return segs


def row_segments(cells: tuple[Cell, ...], cols: list[Column]) -> list[tuple[str, Style | None]]:
    """A row as (text, style) runs, neighbours of one style merged: every later style
    operation is per segment. Exactly the columns' width in cells."""
    merged: list[tuple[str, Style | None]] = []
    text = ""
    style = None
    for cell, col in zip(cells, cols, strict=True):
        for seg in _fitted(cell, col.width, col.right):
            if seg.style == style:
                text += seg.text
            else:
                if text:
                    merged.append((text, style))
                text, style = seg.text, seg.style
    if text:
        merged.append((text, style))
    return merged


def render_row(cells: tuple[Cell, ...], cols: list[Column]) -> Strip:
    return Strip([Segment(t, s) for t, s in row_segments(cells, cols)])


def row_strip(cells: tuple[Cell, ...], cols: list[Column], x: int, width: int, base: Style) -> Strip:
    """The row as drawn: cropped to the view, over the widget's base style. Built as one
    Strip (crop_extend + apply_style would make three, each with its own caches)."""
    full = sum(c.width + 2 * PAD for c in cols)
    if x or full > width:
        return render_row(cells, cols).crop_extend(x, x + width, base).apply_style(base)
    out = [Segment(t, base + s if s is not None else base) for t, s in row_segments(cells, cols)]
    if width > full:
        out.append(Segment(" " * (width - full), base))
    return Strip(out, width)


class WorkerTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    /* the scrollbar's room kept with or without rows to scroll (render.columns.SCROLLBAR): the
       columns that do not fit start past the edge, never as a sliver of their first letter */
    WorkerTable { height: 1fr; background: $surface; scrollbar-gutter: stable; }
    WorkerTable > .worker-table--header { text-style: bold; background: $primary 40%; }
    WorkerTable > .worker-table--cursor { background: $accent 45%; text-style: bold; }
    WorkerTable:blur > .worker-table--cursor { background: $accent 20%; }
    """
    COMPONENT_CLASSES = {"worker-table--header", "worker-table--cursor"}
    BINDINGS = [
        Binding("enter", "select_cursor", "Detail"),
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", show=False),
        Binding("pagedown", "page_down", show=False),
        Binding("home", "first", show=False),
        Binding("end", "last", show=False),
    ]

    @dataclass
    class RowHighlighted(Message):
        key: str | None

    @dataclass
    class RowSelected(Message):
        key: str

    def __init__(self, formatter: Callable[[RowSource], tuple[Cell, ...]], id: str | None = None) -> None:
        super().__init__(id=id)
        self.formatter = formatter  # row source -> cells, called only for rows drawn
        self.cols: list[Column] = []
        self.cells: dict[str, RowSource] = {}  # key -> row source
        self.order: list[str] = []
        self.cursor_row = 0
        self._strips: dict[str, Strip] = {}
        self._header: Strip | None = None
        self.cells_updated = 0  # counters for tests and the bench
        self.rebuilds = 0
        self.reorders = 0
        self.lines_rendered = 0
        self._rendered: tuple[int, int, Style] | None = None  # (scroll x, width, base style) of the cache
        self._base: Style | None = None  # looked up once per render pass (render_lines), not once a line
        self._cursor_style: Style | None = None
        self._width: int | None = None

    # ------------------------------------------------------ DataTable-like API ----
    @property
    def row_count(self) -> int:
        return len(self.order)

    @property
    def shown(self) -> dict[str, RowSource]:
        return self.cells

    def set_columns(self, cols: list[Column]) -> None:
        self.cols = list(cols)
        self._header = None
        self._rendered = None
        self._strips.clear()
        self._resize_virtual()
        self.refresh()

    def add_row(self, source: RowSource, key: str) -> None:
        self.cells[key] = source
        self.order.append(key)

    def update_row(self, key: str, source: RowSource) -> None:
        self.cells[key] = source
        self._strips.pop(key, None)
        self.cells_updated += 1

    def remove_row(self, key: str) -> None:
        del self.cells[key]
        self._strips.pop(key, None)
        self.order.remove(key)

    def clear(self, columns: bool = False) -> None:
        self.cells.clear()
        self.order.clear()
        self._strips.clear()
        if columns:
            self.cols = []
            self._header = None

    def get_row(self, key: str) -> list[Text]:
        return [to_text(c, col.right)
                for c, col in zip(self.formatter(self.cells[key]), self.cols, strict=True)]

    def get_row_index(self, key: str) -> int:
        return self.order.index(key)

    # ----------------------------------------------------------------- apply ----
    def apply(self, rows: list[tuple[str, RowSource]]) -> diff.Plan[RowSource]:
        p = diff.plan(self.cells, self.order, rows)
        if p.empty:
            return p
        keep = self.selected_key()
        if p.rebuild:
            self.rebuilds += 1
            self.clear()
        for k in p.remove:
            self.remove_row(k)
        for key, source in p.update:
            self.update_row(key, source)
        for key, source in p.add:
            self.add_row(source, key=key)
        if p.reorder is not None:
            self.order = list(p.reorder)
            self.reorders += 1
        self._resize_virtual()
        if keep is not None and keep in self.cells:
            self._move_to(self.order.index(keep), announce=False)
        elif keep is not None and "." in keep and keep.split(".")[0] in self.cells:
            self._move_to(self.order.index(keep.split(".")[0]))  # a child row went away: its worker
        else:
            self._move_to(min(self.cursor_row, max(self.row_count - 1, 0)))
        self.refresh()
        return p

    def _resize_virtual(self) -> None:
        width = sum(c.width + 2 * PAD for c in self.cols)
        self.virtual_size = Size(width, len(self.order) + 1)

    # ---------------------------------------------------------------- cursor ----
    def selected_key(self) -> str | None:
        if not self.order:
            return None
        return self.order[min(self.cursor_row, len(self.order) - 1)]

    def selected_rank(self) -> int | None:
        return rank_of_key(self.selected_key())

    def select_key(self, key: str) -> bool:
        if key not in self.cells:
            return False
        self._move_to(self.order.index(key))
        return True

    def _move_to(self, row: int, announce: bool = True) -> None:
        row = max(0, min(row, len(self.order) - 1)) if self.order else 0
        changed = row != self.cursor_row
        self.cursor_row = row
        # Keep the cursor on screen: line 0 is the header.
        body = max(self.scrollable_content_region.height - 1, 1)
        top = int(self.scroll_y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + body:
            self.scroll_to(y=row - body + 1, animate=False)
        if changed:
            self.refresh()
            if announce:
                self.post_message(self.RowHighlighted(self.selected_key()))

    def action_cursor_down(self) -> None:
        self._move_to(self.cursor_row + 1)

    def action_cursor_up(self) -> None:
        self._move_to(self.cursor_row - 1)

    def action_page_down(self) -> None:
        self._move_to(self.cursor_row + max(self.scrollable_content_region.height - 2, 1))

    def action_page_up(self) -> None:
        self._move_to(self.cursor_row - max(self.scrollable_content_region.height - 2, 1))

    def action_first(self) -> None:
        self._move_to(0)

    def action_last(self) -> None:
        self._move_to(len(self.order) - 1)

    def action_select_cursor(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.post_message(self.RowSelected(key))

    def on_click(self, event: events.Click) -> None:
        if event.y < 1:
            return
        row = event.y - 1 + int(self.scroll_y)
        if row < len(self.order):
            self._move_to(row)
            if event.chain >= 2:
                self.action_select_cursor()

    # ------------------------------------------------------------- rendering ----
    def render_lines(self, crop: Region) -> list[Strip]:
        # The widget's base and cursor styles walk the DOM: once a pass, not once a line.
        self._base = self.rich_style
        self._cursor_style = self.get_component_rich_style("worker-table--cursor")
        self._width = self.scrollable_content_region.width
        try:
            return super().render_lines(crop)
        finally:
            self._base = self._cursor_style = self._width = None

    def render_line(self, y: int) -> Strip:
        width = self._width if self._width is not None else self.scrollable_content_region.width
        x = int(self.scroll_x)
        base = self._base if self._base is not None else self.rich_style
        if y == 0:
            if self._header is None:
                labels = tuple(segs.cell(c.label) for c in self.cols)
                self._header = render_row(labels, self.cols)
            style = base + self.get_component_rich_style("worker-table--header")
            return self._header.crop_extend(x, x + width, style).apply_style(style)
        row = y - 1 + int(self.scroll_y)
        if row >= len(self.order):
            return Strip.blank(width, base)
        key = self.order[row]
        # Cached per row with the base style and the visible crop applied, so a row that
        # did not change costs a dict lookup; the cursor line is styled on top.
        view_key = (x, width, base)
        if self._rendered != view_key:
            self._rendered = view_key
            self._strips.clear()
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = row_strip(self.formatter(self.cells[key]), self.cols, x, width, base)
            self.lines_rendered += 1
        if row == self.cursor_row:  # over the cells' own styles, so its background shows
            cursor = self._cursor_style or self.get_component_rich_style("worker-table--cursor")
            return Strip(Segment.apply_style(strip, post_style=cursor), strip.cell_length)
        return strip
