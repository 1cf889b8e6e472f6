"""The tunables screen (`t`): every value the training loop reads with mpwatch.tunable(), its
type, the value in force and its default, and who changed it when, from which step, and how many
ranks took it; a change still pending on a second line (its value, its step, the ranks that took it);
below, the "checkpoint now" requests and what each rank did. Enter on a tunable asks for a new
value (SetTunableDialog); the App sends it (every rank takes it at one step). The rows follow
each status the App applies (tui.render.control_rows). UI thread.
"""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Label, Static

from mpwatch.contract.status import TunableStatus
from mpwatch.tui.render import control_rows
from mpwatch.tui.screens.run_screen import RunScreen
from mpwatch.tui.widgets.cells import lines_to_text, to_text


class TunablesScreen(RunScreen):
    BINDINGS = [Binding("escape,q,t", "close", "Back"), Binding("enter", "edit", "Change")]

    def __init__(self) -> None:
        super().__init__()
        self.title_bar = Static(id="tunables-title")
        self.table: DataTable[Text | str] = DataTable(id="tunables-table", cursor_type="row",
                                                      zebra_stripes=True)
        self.checkpoints = Static(id="tunables-checkpoints")
        self.shown: list[tuple[str, ...]] = []  # the rows on screen (to redraw only on change)

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield self.table
        with VerticalScroll(id="tunables-bottom"):
            yield Static("checkpoints asked (newest first)", classes="pane-title")
            yield self.checkpoints
        yield Footer()

    def on_mount(self) -> None:
        for name, width in control_rows.COLS:
            self.table.add_column(name, key=name, width=width)
        self.table.add_column("CHANGED", key="CHANGED")
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
        self.title_bar.update(Text(f"tunables: {len(ts)} · {how} · Esc: back", style="bold"))
        if st is None:
            return
        rows = [control_rows.tunable_cells(t, st) for t in ts]
        keys = [tuple(str(c) for c in r) for r in rows]
        if keys != self.shown:
            self.shown = keys
            at = self.table.cursor_row
            self.table.clear()
            for t, r in zip(ts, rows, strict=True):  # two lines where a change is pending
                height = 2 if control_rows.next_change(t) is not None else 1
                self.table.add_row(*(to_text(c) for c in r), height=height, key=t["name"])
            if not rows:
                self.table.add_row(Text("none declared yet: mpwatch.tunable(NAME, DEFAULT) in the training "
                                        "loop declares one", style="bright_black"), "", "", "", "")
            self.table.move_cursor(row=min(at, max(len(rows) - 1, 0)))
        self.checkpoints.update(lines_to_text(control_rows.checkpoint_lines(st)))

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
            yield Label(control_rows.dialog_title(t), classes="dialog-title")
            yield Label("Every rank takes it at one step. Enter: send it; Esc: cancel.")
            yield Input(value=text, id="tunable-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
