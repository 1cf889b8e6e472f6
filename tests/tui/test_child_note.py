"""Issue 31, item 7: a worker's child process (a Hogwild trainer, a DataLoader worker) was
shown with its command line as its NOTE; it says what it is: a child process of rank N, its pid,
and whether it reports its own steps. The table and `ctl status`, fed statuses recorded from
real runs (gpu2: rank 0's child; auto: a DataLoader worker each). Fails on the code before."""
from __future__ import annotations

import pytest

from mpwatch.cli.status_text import status_lines
from mpwatch.text.children import child_note
from mpwatch.tui.render import glyphs, view
from tests.tui.recorded import status


@pytest.mark.parametrize("name", ["gpu2", "auto"])
def test_a_childs_note_says_whose_child_it_is(name):
    st = status(name)
    cols = view.columns(200)
    note = next(i for i, c in enumerate(cols) if c.key == "note")
    children = [(w["rank"], c) for w in st["workers"] for c in w["children"]]
    assert children
    rows = {key: src for key, src in view.table_rows(st)}
    for rank, c in children:
        cells = view.row_cells(rows[view.row_key(rank, c["pid"])], cols, glyphs.UNICODE)
        assert cells[note] == f"child process of rank {rank}, pid {c['pid']} ({c['name']})", cells[note]
        assert c["cmd"] not in cells[note]
    lines = [ln for ln in status_lines(st) if "└ " in ln]  # ctl status: a line a child, under its rank
    assert len(lines) == len(children)
    for (rank, c), line in zip(children, lines, strict=True):
        assert line.endswith(f"child process of rank {rank}, pid {c['pid']} ({c['name']})"), line
        assert c["cmd"][:50] not in line


def test_a_child_that_reports_its_own_steps_says_so():
    st = status("gpu2")
    c = dict(st["workers"][0]["children"][0], reporting=True)
    assert child_note(c, 0).endswith("; reports its own steps")
