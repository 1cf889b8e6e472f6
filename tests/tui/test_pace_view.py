"""Issue 32 on screen, fed the `straggler` recording (tests/record.py: three ranks of gloo DDP
with no line of mpwatch's, rank 1's forward 0.2 s slower): the PACE column at wide sizes and not at
80 columns, the detail view's pace line with the recorded numbers, the finding as a warning in
the alert lines and in the GPU screen's list with what it has cost; SVG snapshots of the main
screen and of rank 1's detail view at 80x24 and 160x48 (tests/tui/test_snapshots.py)."""
from __future__ import annotations

import pytest

from mpwatch.text import fmt
from mpwatch.tui.render import glyphs, gpu_rows, gpu_tables, pace, view
from mpwatch.tui.widgets.cells import lines_to_text
from tests.tui.recorded import status

G = glyphs.UNICODE


def _plain(cell) -> str:
    return cell if isinstance(cell, str) else "".join(t for t, _ in cell)


def test_the_pace_column_is_there_at_wide_sizes_only_and_names_the_slow_phase():
    st = status("straggler")
    wide = view.columns(160)
    keys = [c.key for c in wide]
    assert "pace" in keys and keys.index("pace") < keys.index("note"), keys
    cols = [c for c in wide if c.key == "pace"]
    cells = {w["rank"]: _plain(view.worker_cells(w, cols, G, False)[0]) for w in st["workers"]}
    rel = st["workers"][1]["pace"]["relative"]
    slow = min(rel, key=rel.get)
    phase = next(a["straggler"]["phase"] for a in st["alerts"] if a["kind"] == "straggler")
    assert slow == phase and cells[1] == f"{rel[slow]:.2f} {pace.SHORT.get(slow, slow)}", cells
    for r in (0, 2):
        assert float(cells[r]) >= pace.SLOW, cells  # as fast as the median rank


def test_at_80_columns_the_pace_column_scrolls_out_of_sight():
    cols = view.columns(80)
    assert "pace" in [c.key for c in cols]  # there, to scroll to
    room = 80 - view.SCROLLBAR
    seen = []
    for c in cols:
        room -= c.width + view.PAD
        if room < 0:
            break
        seen.append(c.key)
    assert "pace" not in seen, seen


def test_the_detail_line_says_each_phase_with_the_recorded_numbers():
    st = status("straggler")
    w = st["workers"][1]
    p = w["pace"]
    text = pace.pace_text(w, G)
    shown = [(k, v) for k, v in sorted(p["phases"].items(), key=lambda kv: -kv[1])
             if k != "other" or v >= 0.01 * p["step_s"]]  # an "other" of no account is left out
    assert text == (f"pace: {fmt.span(p['step_s'])} a step: "
                    + " · ".join(f"{k} {fmt.span(v)} ×{p['relative'][k]:.2f}" for k, v in shown)
                    + f" (×: speed against the median rank; {p['steps']} steps in {fmt.age(p['window_s'])})"), text
    assert shown[0][0] == "forward"  # the straggler's own time first
    assert pace.pace_text(w, glyphs.ASCII).isascii()


def test_the_finding_is_a_warning_and_the_gpu_screen_says_what_it_cost():
    st = status("straggler")
    a = next(a for a in st["alerts"] if a["kind"] == "straggler")
    assert gpu_rows.alert_items(st)[0] == ("warning", a["message"])
    listed = lines_to_text(gpu_tables.alert_list(st, G)[:1]).plain
    assert listed.startswith(f"{G.alert['warning']} rank 1 is the straggler: its forward takes ")
    assert f"it has cost the run {fmt.span(a['straggler']['lost_s'])})" in listed


def test_a_run_that_times_no_phase_keeps_the_room_for_its_notes():
    """`ddp` (report() alone, no phase timed): no rank has a pace, so no PACE column."""
    assert all(w["pace"] is None for w in status("ddp")["workers"])
    with_pace, without = view.columns(160), view.columns(160, pace=False)
    assert "pace" not in [c.key for c in without]
    note = {c.key: c.width for c in with_pace}["note"]
    assert {c.key: c.width for c in without}["note"] == note + 9 + view.PAD


def test_a_phase_hundreds_of_times_slower_reads_its_true_ratio_in_the_pace_cell_and_the_detail():
    """Issue 40: a forward 670x slower read '0.01 fwd'. The `slow_data` recording (rank 1's Dataset
    0.15 s a batch more, tests/data/pace) through the producer's own functions: its data phase
    reads 1/N, N the ratio of the times, in the PACE cell and in the detail view's pace line."""
    from mpwatch.contract import straggler
    from tests.supervisor.test_straggler_rule import _paces_at_end, load

    paces = _paces_at_end(load("slow_data"))
    rel = straggler.relative(paces)
    p = dict(paces[1], relative=rel[1])
    n = round(1 / rel[1]["data"])
    assert 300 < n < 700 and rel[1]["data"] == pytest.approx(paces[0]["phases"]["data"] / p["phases"]["data"],
                                                              rel=0.5)
    w = {"rank": 1, "state": "running", "pace": p}
    assert _plain(pace.pace_cell(w)) == f"1/{n} data"[:pace.WIDTH]
    assert f"×1/{n}" in pace.pace_text(w, G)
    assert pace.ratio(0.05) == "0.05" and pace.ratio(1.0) == "1.00"
