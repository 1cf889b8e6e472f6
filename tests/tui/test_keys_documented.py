"""README's table of keys documents every key of the TUI's one key table (tui.keys): a key added
there and not here would be a key a newcomer never learns."""
from __future__ import annotations

import re

from mpwatch.tui import keys
from tests.manual import section

# Textual's key names, as the README writes them.
SHOWN = {"question_mark": "?", "slash": "/", "plus": "+", "minus": "-", "enter": "Enter", "escape": "Esc",
         "comma": ",", "full_stop": ".", "left_square_bracket": "[", "right_square_bracket": "]",
         "home": "Home", "end": "End"}


def _documented() -> set[str]:
    table = section("README.md", "The screen and its keys")
    cells = [c for line in table.splitlines() if line.startswith("|") for c in line.split("|")[1::2]]
    return {word for cell in cells for quoted in re.findall(r"`([^`]+)`", cell) for word in quoted.split()}


def test_every_key_of_the_table_is_in_the_readme():
    documented = _documented()
    missing = [SHOWN.get(k.key, k.key) for k in (*keys.LIVE, *keys.CURSOR)
               if SHOWN.get(k.key, k.key) not in documented]
    assert not missing, f"README's keys table does not name {missing} (tui/keys.py has them)"


def test_a_key_the_readme_lacks_is_found():
    assert "Z" not in _documented() and "q" in _documented()
