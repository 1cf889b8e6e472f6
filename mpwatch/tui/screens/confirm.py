"""Questions before a destructive action: yes or no (kill, restart, a resize that restarts
every worker), or a choice of several (restarting one rank of a process group: that rank
only, or all of them). UI thread."""
from __future__ import annotations

from typing import NamedTuple, TypeVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button
from textual.widgets.button import ButtonVariant

from mpwatch.tui.render.segs import Cell, cell
from mpwatch.tui.widgets.cells import button
from mpwatch.tui.widgets.lines import LineLabel

_Answer = TypeVar("_Answer")


class _Question(ModalScreen[_Answer]):
    """The question, its detail under it when given, what the subclass adds (`notes`), then
    the answers' buttons (`buttons`)."""

    def __init__(self, question: Cell, detail: Cell | None = None):
        super().__init__()
        self.question = question
        self.detail = detail

    def notes(self) -> ComposeResult:
        yield from ()

    def buttons(self) -> ComposeResult:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield LineLabel(self.question, classes="dialog-title")
            if self.detail:
                yield LineLabel(self.detail, classes="dialog-detail")
            yield from self.notes()
            with Horizontal(classes="dialog-buttons"):
                yield from self.buttons()


class ConfirmDialog(_Question[bool]):
    """Yes or no; a warning, when given, after the detail and in the warning's colour."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: Cell, detail: Cell | None = None, warning: Cell | None = None):
        super().__init__(question, detail)
        self.warning = warning

    def notes(self) -> ComposeResult:
        if self.warning:
            yield LineLabel(self.warning, classes="dialog-detail dialog-warning warning")

    def buttons(self) -> ComposeResult:
        yield button(cell("[y] Yes"), id="yes", variant="error")
        yield button(cell("[n] No"), id="no", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Choice(NamedTuple):
    key: str  # the key that chooses it (also shown on its button)
    label: str  # its words (the key's own); the button says "[key] label"
    value: str  # what the dialog returns
    variant: ButtonVariant = "default"  # the button's: error for a destructive choice


class ChoiceDialog(_Question[str | None]):
    """Several answers, each a key and a button; Escape cancels (None)."""

    BINDINGS = [Binding("escape", "choose", "Cancel")]

    def __init__(self, question: Cell, detail: Cell | None, choices: list[Choice]):
        super().__init__(question, detail)
        self.choices = choices

    def buttons(self) -> ComposeResult:
        for c in self.choices:
            yield button(cell(f"[{c.key}] {c.label}"), id=f"choice-{c.value}", variant=c.variant)

    def on_key(self, event: events.Key) -> None:
        chosen = next((c for c in self.choices if c.key == event.key), None)
        if chosen is not None:
            event.stop()
            self.dismiss(chosen.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(str(event.button.id).removeprefix("choice-"))

    def action_choose(self, value: str | None = None) -> None:
        self.dismiss(value)
