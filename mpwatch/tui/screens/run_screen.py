"""The base of the screens that show one run (detail, GPUs): the App's actions at hand."""
from __future__ import annotations

from textual.screen import ModalScreen

from mpwatch.tui.actions import RunActions


class RunScreen(ModalScreen[None]):
    @property
    def run(self) -> RunActions:
        app = self.app
        assert isinstance(app, RunActions)  # these screens are pushed by the mpwatch App only
        return app
