"""The manual, README.md and docs/*.md, as the tests read it: a page's section by its heading, a
code block by its `<!-- snippet: NAME -->` marker, and a page's links and anchors as GitHub makes
them. Tests that hold the manual to the code (the settings table, the events, the callbacks run as
written) read it here, so a section can move to another page without its test losing it.

Standard library only and importable alone: a fixture that runs a snippet as a worker script puts
tests/ on sys.path and imports `manual`."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^(#{1,6}) +(.+?)(?: +#+)? *$")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def read(page: str) -> str:
    """A page by its path from the repository root ("README.md", "docs/settings.md")."""
    return (ROOT / page).read_text()


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, each fenced line blanked (line numbers kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return out


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each heading outside code blocks."""
    found = []
    for i, line in enumerate(prose(text)):
        m = _HEADING.match(line)
        if m:
            found.append((i, len(m.group(1)), m.group(2)))
    return found


def section(page: str, heading: str) -> str:
    """The text under the heading titled `heading` on `page`, up to the next heading of its level
    or a higher one."""
    text = read(page)
    lines = text.split("\n")
    marks = headings(text)
    for n, (i, level, title) in enumerate(marks):
        if title == heading:
            end = next((j for j, lv, _ in marks[n + 1:] if lv <= level), len(lines))
            return "\n".join(lines[i + 1:end])
    raise AssertionError(f"{page} has no heading {heading!r}")


def snippet(page: str, name: str) -> str:
    """The code block that follows `<!-- snippet: NAME -->` on `page`."""
    text = read(page)
    start = text.index(f"<!-- snippet: {name} -->")
    block = text.index("```python\n", start) + len("```python\n")
    return text[block:text.index("\n```", block)]


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it: the rendered text in lower case, punctuation
    other than `-` and `_` dropped, each space a `-`."""
    shown = _LINK.sub(r"\1", title).lower()
    return re.sub(r"[^\w\- ]", "", shown).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a page; a title seen before gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for _, _, title in headings(text):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[str]:
    """The target of every inline link outside code (blocks and spans)."""
    body = _CODE_SPAN.sub("code", "\n".join(prose(text)))
    return [m.group(2) for m in _LINK.finditer(body)]
