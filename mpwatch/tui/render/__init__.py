"""The TUI's pure text layer: a status in, lines of styled segments out (no Textual, no clock)."""
