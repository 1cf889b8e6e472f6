"""Questions before a destructive action: yes or no (kill, restart, a resize that restarts
every worker), or a choice of several (restarting one rank of a process group: that rank
only, or all of them). UI thread."""
from __future__ import annotations

from typing import NamedTuple

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label
from textual.widgets.button import ButtonVariant


class ConfirmDialog(ModalScreen[bool]):
    """Yes or no; a warning, when given, after the detail and in the warning's colour."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str, detail: str = "", warning: str = ""):
        super().__init__()
        self.question = question
        self.detail = detail
        self.warning = warning

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-title", markup=False)
            if self.detail:
                yield Label(self.detail, classes="dialog-detail", markup=False)
            if self.warning:
                yield Label(self.warning, classes="dialog-detail dialog-warning warning", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(Content("[y] Yes"), id="yes", variant="error")
                yield Button(Content("[n] No"), id="no", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Choice(NamedTuple):
    key: str  # the key that chooses it (also shown on its button)
    label: str
    value: str  # what the dialog returns
    variant: ButtonVariant = "default"  # the button's: error for a destructive choice


class ChoiceDialog(ModalScreen[str | None]):
    """Several answers, each a key and a button; Escape cancels (None)."""

    BINDINGS = [Binding("escape", "choose", "Cancel")]

    def __init__(self, question: str, detail: str, choices: list[Choice]):
        super().__init__()
        self.question = question
        self.detail = detail
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-title", markup=False)
            if self.detail:
                yield Label(self.detail, classes="dialog-detail", markup=False)
            with Horizontal(classes="dialog-buttons"):
                for c in self.choices:
                    yield Button(Content(f"[{c.key}] {c.label}"), id=f"choice-{c.value}", variant=c.variant)

    def on_key(self, event: events.Key) -> None:
        chosen = next((c for c in self.choices if c.key == event.key), None)
        if chosen is not None:
            event.stop()
            self.dismiss(chosen.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(str(event.button.id).removeprefix("choice-"))

    def action_choose(self, value: str | None = None) -> None:
        self.dismiss(value)
