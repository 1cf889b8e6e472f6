"""The footer of the main screen and the detail view: the keys they show, in their order, in
Textual's compact style (one space between a key and its word), and only those that fit
whole. A narrow terminal loses the last ones, never half of one; the main screen's ? and q
come first (tui.keys), so they always stay (60 columns keep them), and at 80 columns it has
room for c and t. UI thread.
"""
from __future__ import annotations

from textual import events
from textual.widgets import Footer


class KeysFooter(Footer):
    DEFAULT_CSS = "KeysFooter { padding-left: 1; }"  # in line with the lines above it

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id, show_command_palette=False, compact=True)

    async def recompose(self) -> None:
        """The keys change (a screen, a run that ended): composed again, then fitted once
        they are laid out (their styles, hence their widths, are known then)."""
        await super().recompose()
        self.call_after_refresh(self.fit)

    def on_resize(self, event: events.Resize) -> None:
        self.fit()

    def fit(self) -> None:
        """Show the keys, in order, while each fits whole; hide the rest."""
        room = self.content_size.width
        if not room:  # not laid out yet: its resize fits it
            return
        for key in self.query_children("FooterKey"):  # Footer's own items, by their CSS type
            need = key.get_content_width(self.size, self.app.size) + key.styles.margin.right
            key.display = need <= room
            room = room - need if key.display else -1  # once one is left out, so is every later one
