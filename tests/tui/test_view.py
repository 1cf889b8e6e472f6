"""The pure layers of the TUI: glyph choice, bars, the formatting of rows and lines,
and the table-diff plan. No terminal, no processes."""
from __future__ import annotations

from mpwatch.tui import diff, glyphs, view
from mpwatch.tui.widgets import bars
from mpwatch.tui.widgets.loss_plot import plot_lines
from tests.tui.canned import status


def test_locale_decides_unicode_or_ascii():
    assert glyphs.locale_is_utf8({"LANG": "en_US.UTF-8"})
    assert glyphs.locale_is_utf8({"LC_ALL": "C.utf8", "LANG": "C"})
    assert not glyphs.locale_is_utf8({"LC_ALL": "C", "LANG": "en_US.UTF-8"})  # LC_ALL wins
    assert not glyphs.locale_is_utf8({"LANG": "POSIX"})
    assert not glyphs.locale_is_utf8({})
    assert not glyphs.locale_is_utf8({"LANG": "en_US.UTF-8", "MPWATCH_ASCII": "1"})
    assert glyphs.pick({"LANG": "C"}) is glyphs.ASCII
    # Python's own C-locale coercion (PEP 538) must not pass for a UTF-8 terminal
    assert not glyphs.locale_is_utf8({"LANG": "C", "LC_CTYPE": "C.UTF-8"})
    assert not glyphs.locale_is_utf8({"LC_CTYPE": "C.UTF-8"})
    assert glyphs.locale_is_utf8({"LANG": "en_US.UTF-8", "LC_CTYPE": "C.UTF-8"})


def test_ascii_glyphs_are_ascii():
    g = glyphs.ASCII
    text = g.spark + "".join(g.phase.values()) + "".join(g.state.values()) + g.bar_full + g.bar_empty
    assert text.isascii()
    assert len(set(g.state.values())) == len(g.state)  # states tell apart without colour


def test_sparkline_scales_and_keeps_the_tail():
    assert bars.sparkline([1, 2, 3, 4], 8, "abcd") == "abcd"
    assert bars.sparkline(range(100), 5, "ab") == "aaabb"  # only the last 5: 95..99
    assert bars.sparkline([2.0, 2.0], 4, "abc") == "bb"
    assert bars.sparkline([], 4, "ab") == ""
    assert bars.sparkline([float("nan"), 1.0, float("inf"), 3.0], 4, "ab") == "ab"


def test_split_width_sums_to_width():
    assert bars.split_width([1, 1, 1], 10) in ([4, 3, 3], [3, 4, 3], [3, 3, 4])
    assert sum(bars.split_width([0.2, 0.5, 0.3, 0.0], 7)) == 7
    assert bars.split_width([0, 0], 5) == [0, 0]


def test_phase_shares_fill_other_from_uptime():
    s = bars.phase_shares({"data": 10, "compute": 30, "custom": 5}, uptime=100)
    assert s == {"data": 10, "compute": 30, "sync": 0, "other": 60}
    assert bars.phase_shares({}, 100) == {}
    s = bars.phase_shares({"data": 80, "compute": 80}, uptime=100)  # threads overlap
    assert s["other"] == 0
    bar = bars.stacked_bar(bars.phase_shares({"data": 25, "compute": 75}, 100), 8, glyphs.ASCII.phase)
    assert bar == [("data", "dd"), ("compute", "cccccc")]


def test_rows_fold_filter_and_sort():
    st = status()
    g = glyphs.ASCII
    rows = view.table_rows(st, g)
    assert [k for k, _ in rows] == ["w0", "w0.41100", "w0.41101", "w1", "w2", "w3"]
    assert [k for k, _ in view.table_rows(st, g, folded={0})] == ["w0", "w1", "w2", "w3"]
    assert [k for k, _ in view.table_rows(st, g, filter_text="failed")] == ["w3"]
    assert [k for k, _ in view.table_rows(st, g, filter_text="2")] == ["w2"]
    assert [k for k, _ in view.table_rows(st, g, filter_text="41001")] == ["w1"]
    assert [k for k, _ in view.table_rows(st, g, filter_text="cuda error")] == ["w3"]
    by_state = [k for k, _ in view.table_rows(st, g, sort="state", folded={0})]
    assert by_state == ["w3", "w1", "w2", "w0"]  # failed, stalled, paused, running
    by_loss = [k for k, _ in view.table_rows(st, g, sort="loss", folded={0})]
    assert by_loss == ["w0", "w2", "w1", "w3"]


def test_row_sources_format_into_cells():
    st = status()
    cols = view.columns(False)
    rows = dict(view.table_rows(st, glyphs.ASCII))
    assert view.row_cells(rows["w0"], cols, glyphs.ASCII)[0] == "-0"  # unfolded, with children
    assert view.row_cells(rows["w0.41100"], cols, glyphs.ASCII)[0] == "  `"
    assert rows["w1"] == dict(view.table_rows(status(), glyphs.ASCII))["w1"]  # same data, equal


def test_worker_cells_read_without_colour():
    st = status()
    cols = view.columns(True, 200)
    keys = [c.key for c in cols]
    cells = dict(zip(keys, view.worker_cells(st["workers"][3], cols, glyphs.ASCII, folded=False)))
    assert cells["state"][0][0] == "x failed"
    assert cells["note"].startswith("exit 1: RuntimeError: CUDA error")
    assert "restarted 1x" in cells["note"]
    assert cells["hb"] == ""  # a dead worker has no heartbeat age
    stalled = dict(zip(keys, view.worker_cells(st["workers"][1], cols, glyphs.ASCII, folded=False)))
    assert stalled["state"][0][0] == "! stalled" and "stalled at step 1187" in stalled["note"]
    assert stalled["hb"][0][1] == "bold yellow"


def test_gpu_lines_without_and_with_gpus():
    st = status()
    assert view.gpu_lines(st, glyphs.ASCII)[0][1][0] == "no NVIDIA GPU found"
    st["gpu_status"] = "NVML library not found"
    assert view.gpu_lines(st, glyphs.ASCII)[0][1][0] == "NVML library not found"
    st["gpus"] = [{"index": 0, "name": "H100", "memory_used": 60 * 2**30, "memory_total": 80 * 2**30,
                   "utilization": 93, "processes": [{"pid": 41000, "rank": 0, "used_bytes": 2**30},
                                                    {"pid": 999, "rank": None, "user": "bob", "used_bytes": 2**30}]}]
    text = "".join(seg[0] for seg in view.gpu_lines(st, glyphs.ASCII, width=10)[0])
    assert "GPU0 H100" in text and "########.." in text  # 60 of 80 GiB
    assert "util 93%" in text and "ranks 0" in text and "pid 999 (bob)" in text


def test_event_notices_say_what_happened():
    text, sev = view.event_notice({"event": "worker_exited", "rank": 1, "state": "failed",
                                   "cause": "exit 1", "stderr_tail": ["Traceback", "ValueError: bad"]})
    assert sev == "error" and "rank 1 failed: exit 1" in text and "ValueError: bad" in text
    assert view.event_notice({"event": "stalled", "rank": 0, "silent_for": 61.0, "step": 7})[1] == "warning"
    assert "resized from 2 to 3" in view.event_notice({"event": "resized", "frm": 2, "to": 3, "mode": "x"})[0]
    assert view.event_notice({"event": "report"}) is None
    assert view.event_notice({"event": "run_finished", "exit_code": 0})[1] == "information"


def test_diff_patches_rows_reorders_and_rebuilds_only_when_most_are_gone():
    shown = {"a": ("1", "x"), "b": ("2", "y")}
    p = diff.plan(shown, ["a", "b"], [("a", ("1", "x")), ("b", ("3", "y"))])
    assert not p.rebuild and p.update == [("b", ("3", "y"))] and not p.add and not p.remove
    p = diff.plan(shown, ["a", "b"], [("a", ("1", "x")), ("b", ("2", "y")), ("c", ("4", "z"))])
    assert p.add == [("c", ("4", "z"))] and not p.update
    p = diff.plan(shown, ["a", "b"], [("b", ("2", "y"))])
    assert p.remove == ["a"] and not p.rebuild
    p = diff.plan(shown, ["a", "b"], [("b", ("2", "y")), ("a", ("1", "x"))])  # sorted otherwise
    assert not p.rebuild and not p.update and p.reorder == ["b", "a"]
    p = diff.plan(shown, ["a", "b"], [("a", ("1", "x")), ("c", ("5", "z")), ("b", ("2", "y"))])
    assert p.add == [("c", ("5", "z"))] and p.reorder == ["a", "c", "b"]  # a child row in the middle
    assert diff.plan(shown, ["a", "b"], [("a", ("1", "x")), ("b", ("2", "y"))]).empty
    many = {f"k{i}": (str(i),) for i in range(20)}
    p = diff.plan(many, list(many), [("k0", ("0",))])  # most rows gone: clear, not 19 removes
    assert p.rebuild and p.add == [("k0", ("0",))]


def test_loss_plot_highlights_the_selected_rank():
    lines = plot_lines({0: [(0, 1.0), (10, 0.5)], 1: [(0, 0.9), (10, 0.4)]}, 1, 40, 6, glyphs.ASCII)
    text = "\n".join("".join(seg[0] for seg in line) for line in lines)
    assert "*" in text and "." in text and "step 0" in text
    assert plot_lines({}, 0, 40, 6, glyphs.ASCII)[0][0][0] == "no loss reported yet"


def test_ending_lines_name_each_worker():
    st = status()
    st["run"]["exit_code"] = 1
    lines = view.ending_lines(st)
    assert lines[0].startswith("run finished, exit code 1")
    assert "rank 3: failed (exit 1: RuntimeError" in lines[4]
