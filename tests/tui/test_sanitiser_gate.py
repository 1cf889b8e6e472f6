"""Issue 39, one sanitiser at the terminal, by construction: what a run says reaches a widget only
through text.safe. The render layer's currency (tui.render.segs) holds `Safe` text only, and the
widgets' setters take only that type, so mypy refuses a field that skips the sanitiser; these
tests hold the rest of the house to it, read from the source with ast: `Safe` is made in text/safe.py
alone, and outside tui/widgets/ (the gate) no module hands a Textual widget a text of its own
(no Rich Text, no Static or Label built, no update/write/notify, no border title)."""
from __future__ import annotations

import ast
from pathlib import Path

import mpwatch
from mpwatch.text.safe import Safe, clean, printable
from mpwatch.tui.render import segs
from mpwatch.tui.widgets.cells import lines_to_text, to_text

ROOT = Path(mpwatch.__file__).parent
GATE = ROOT / "tui" / "widgets"
# Textual's and Rich's ways of putting a text on screen, and what would build one
TEXT_MAKERS = {"Text", "Content", "Segment", "Strip", "Static", "Label", "Button", "Option", "RichLog", "Log",
               "DataTable", "OptionList", "Input", "Markdown", "Pretty", "Digits", "Tree", "Header", "Link",
               "Sparkline", "TextArea", "Placeholder", "Rule", "ListItem"}
SETTERS = {"update", "write", "notify", "add_row", "add_rows", "add_option", "add_options", "set_options",
           "replace_option_prompt", "add_column", "add_columns", "set_tooltip"}
TEXT_ATTRS = {"border_title", "border_subtitle", "title", "sub_title", "tooltip", "placeholder", "value"}
ALLOWED_IMPORTS = {"rich.cells"}  # widths of text only (tui.render.segs)


def _text_module(module: str) -> bool:
    """Rich (but its cell widths), and Textual's content and strips: what makes a text to draw."""
    return (module.split(".")[0] == "rich" and module not in ALLOWED_IMPORTS) or module in (
        "textual.content", "textual.strip")


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    where = path.relative_to(ROOT.parent)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _text_module(node.module or ""):
            out.append(f"{where}:{node.lineno} imports {node.module}")
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if isinstance(f, ast.Name) and name in TEXT_MAKERS:
                out.append(f"{where}:{node.lineno} builds a {name}")
            elif isinstance(f, ast.Attribute) and name in SETTERS:
                out.append(f"{where}:{node.lineno} calls .{name}()")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out += [f"{where}:{node.lineno} sets .{t.attr}" for t in targets
                    if isinstance(t, ast.Attribute) and t.attr in TEXT_ATTRS]
        elif isinstance(node, ast.FunctionDef) and node.name in ("render", "render_line", "render_lines"):
            out.append(f"{where}:{node.lineno} renders by itself ({node.name})")
    return out


def test_outside_the_gate_no_tui_module_hands_a_widget_its_own_text() -> None:
    offences = [o for path in sorted((ROOT / "tui").rglob("*.py")) if GATE not in path.parents
                for o in _offences(path)]
    assert not offences, "\n".join(offences)


def test_the_checker_finds_each_way_around_the_gate(tmp_path: Path) -> None:
    bad = tmp_path / "tui" / "screens" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("from rich.text import Text\nfrom textual.widgets import Static\n"
                   "def f(w, name):\n    w.update(Text(name))\n    w.border_title = name\n"
                   "    return Static(name)\nclass W:\n    def render(self):\n        return ''\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        found = _offences(bad)
    finally:
        ROOT = old
    assert [o.split(" ", 1)[1] for o in found] == sorted(
        ["imports rich.text", "calls .update()", "builds a Text", "sets .border_title", "builds a Static",
         "renders by itself (render)"], key=[o.split(" ", 1)[1] for o in found].index), found


def test_safe_is_made_by_the_sanitiser_alone() -> None:
    makers = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "text" / "safe.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name == "Safe" or (name == "cast" and node.args and "Safe" in ast.unparse(node.args[0])):
                makers.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} ({name})")
    assert not makers, makers


HOSTILE = "\x1b]0;TITLE\x07\x1b[2J\x9b31m\x00\x7f\tname"


def test_the_sanitiser_leaves_no_control_character_and_the_gate_no_raw_text() -> None:
    said = clean(HOSTILE)
    assert type(said) is Safe and said.isprintable() and "\t" not in said
    assert printable(HOSTILE) == "?]0;TITLE??[2J?31m??\tname"  # a CLI line keeps its tab
    # the segments are the sanitiser's; and a text typed Any that never passed it is put through it
    line = segs.line((HOSTILE, "bold"))
    leaked: segs.Line = ((HOSTILE, ""),)  # type: ignore[assignment]  # a str where Safe is due
    for text in (to_text(line), to_text(leaked), lines_to_text([line, leaked]), to_text(HOSTILE)):  # type: ignore[arg-type]
        assert text.plain.replace("\n", "").isprintable(), repr(text.plain)
