"""The tunables screen (`t`): every value the training loop reads with mpwatch.tunable(), its
type, the value in force and its default, and who changed it when, from which step, and how many
ranks took it; a change still pending on a second line (its value, its step, the ranks that took it);
below, the "checkpoint now" requests and what each rank did. Enter on a tunable asks for a new
value (SetTunableDialog); the App sends it (every rank takes it at one step). The rows follow
each status the App applies (tui.render.control_rows). UI thread.
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input

from mpwatch.contract import TunableStatus
from mpwatch.tui.render import control_rows
from mpwatch.tui.render.segs import BLANK, cell, line
from mpwatch.tui.screens.run_screen import RunScreen
from mpwatch.tui.widgets.lines import LineLabel, Lines, LineTable, SafeInput


class TunablesScreen(RunScreen):
    BINDINGS = [Binding("escape,q,t", "close", "Back"), Binding("enter", "edit", "Change")]

    def __init__(self) -> None:
        super().__init__()
        self.title_bar = Lines(id="tunables-title")
        self.table = LineTable(id="tunables-table", cursor_type="row", zebra_stripes=True)
        self.checkpoints = Lines(id="tunables-checkpoints")
        self.shown: list[object] = []  # the rows on screen (to redraw only on change)

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield self.table
        with VerticalScroll(id="tunables-bottom"):
            yield Lines(cell("checkpoints asked (newest first)"), classes="pane-title")
            yield self.checkpoints
        yield Footer()

    def on_mount(self) -> None:
        self.table.set_columns([(cell(name), width) for name, width in control_rows.COLS]
                               + [(cell("CHANGED"), None)])
        self.table.focus()
        self.show_status()

    def tunables(self) -> list[TunableStatus]:
        st = self.run.status
        return list(st.get("tunables") or []) if st is not None else []

    def show_status(self) -> None:
        st = self.run.status
        ts = self.tunables()
        how = ("Enter: change one, on every rank at one step" if self.run.can_act
               else "as of the moment shown; read-only here")
        self.title_bar.show([line((f"tunables: {len(ts)} · {how} · Esc: back", "bold"))])
        if st is None:
            return
        rows = [control_rows.tunable_cells(t, st) for t in ts]
        if rows != self.shown:
            self.shown = list(rows)
            at = self.table.cursor_row
            self.table.clear()
            for t, r in zip(ts, rows, strict=True):  # two lines where a change is pending
                self.table.add_lines_row(r, key=t["name"])
            if not rows:
                self.table.add_lines_row([[line(("none declared yet: mpwatch.tunable(NAME, DEFAULT) in the "
                                                 "training loop declares one", "bright_black"))]]
                                         + [[BLANK]] * 4)
            self.table.move_cursor(row=min(at, max(len(rows) - 1, 0)))
        self.checkpoints.show(control_rows.checkpoint_lines(st))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Enter's "Change" leaves the footer where nothing can be set (a replay, an ended run)."""
        return action != "edit" or self.run.can_act

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row (the table has the key first)."""
        self.action_edit()

    def action_edit(self) -> None:
        ts = self.tunables()
        if not ts or self.table.cursor_row >= len(ts):
            self.run.say("no tunable to change yet", "warning")
            return
        t = ts[self.table.cursor_row]
        if not self.run.may_act(f"change {t['name']}"):
            return

        def chosen(text: str | None) -> None:
            if text is not None:
                self.run.set_tunable(t["name"], text)
        self.app.push_screen(SetTunableDialog(t), chosen)

    def action_close(self) -> None:
        self.dismiss(None)


class SetTunableDialog(ModalScreen[str | None]):
    """A tunable's new value, typed as text (the supervisor reads it by the tunable's type and
    says why not); None: cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, t: TunableStatus):
        super().__init__()
        self.t = t

    def compose(self) -> ComposeResult:
        t = self.t
        value = t["value"]
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        with Vertical(classes="dialog"):
            yield LineLabel(control_rows.dialog_title(t), classes="dialog-title")
            yield LineLabel(cell("Every rank takes it at one step. Enter: send it; Esc: cancel."))
            yield SafeInput(value=cell(text), id="tunable-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
