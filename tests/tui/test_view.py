"""The pure layers of the main screen, fed statuses recorded from real runs (tests/record.py):
glyph choice, bars, the worker table's columns and rows, the GPU rows and alert lines, and
the table-diff plan. Every expected number is read from the recorded status itself, so a
renderer that reads a key the producer does not fill fails here (and in mypy)."""
from __future__ import annotations

import pytest

from mpwatch.text import fmt
from mpwatch.tui.render import bars, columns, diff, findings, glyphs, gpu_rows, segs, view
from tests.tui.recorded import status

G = glyphs.ASCII


def test_locale_decides_unicode_or_ascii():
    assert glyphs.locale_is_utf8({"LANG": "en_US.UTF-8"})
    assert glyphs.locale_is_utf8({"LC_ALL": "C.utf8", "LANG": "C"})
    assert not glyphs.locale_is_utf8({"LC_ALL": "C", "LANG": "en_US.UTF-8"})  # LC_ALL wins
    assert not glyphs.locale_is_utf8({"LANG": "POSIX"})
    assert not glyphs.locale_is_utf8({})
    assert glyphs.pick({"LANG": "en_US.UTF-8"}, ascii_only=True) is glyphs.ASCII  # MPWATCH_ASCII=1
    assert glyphs.pick({"LANG": "en_US.UTF-8"}) is glyphs.UNICODE
    assert glyphs.pick({"LANG": "C"}) is glyphs.ASCII
    # Python's own C-locale coercion (PEP 538) must not pass for a UTF-8 terminal
    assert not glyphs.locale_is_utf8({"LANG": "C", "LC_CTYPE": "C.UTF-8"})
    assert not glyphs.locale_is_utf8({"LC_CTYPE": "C.UTF-8"})
    assert glyphs.locale_is_utf8({"LANG": "en_US.UTF-8", "LC_CTYPE": "C.UTF-8"})


def test_ascii_glyphs_are_ascii_and_tell_shapes_apart():
    g = glyphs.ASCII
    text = (g.spark + "".join(g.phase.values()) + "".join(g.state.values()) + g.bar_full + g.bar_empty
            + "".join(g.mem.values()) + g.collision + "".join(g.alert.values()) + "".join(g.mark.values())
            + g.capacity + g.stack + g.outside)
    assert text.isascii()
    for group in (g.state, g.mem, g.alert, g.mark):  # told apart without colour (NO_COLOR)
        assert len(set(group.values())) == len(group)


def test_sparkline_scales_and_shows_the_whole_series():
    assert bars.sparkline([1, 2, 3, 4], 8, "abcd") == "abcd"
    assert bars.sparkline(range(1, 101), 5, "abcde") == "abcde"  # 100 values in 5 cells: each their mean
    assert bars.sparkline([1, 10, 100, 1000], 4, "abcd") == "abcd"  # a span of 10x or more: a log scale
    assert bars.sparkline([5, 6, 7, 8, 9, 10, 11, 12], 4, "ab") == "aabb"  # linear within a factor of 10
    assert bars.sparkline([2.0, 2.0], 4, "abc") == "bb"
    assert bars.sparkline([], 4, "ab") == ""
    assert bars.sparkline([float("nan"), 1.0, float("inf"), 3.0], 4, "ab") == "ab"
    # a fixed scale (memory of a capacity, a percentage); unknown is blank, not zero
    assert bars.sparkline_scaled([0, 50, 100, None], 4, "abc", 0, 100) == "abc "


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


# ------------------------------------------------------------- the table ----
def test_columns_at_80_keep_gpu_over_cpu_rss_pid_and_phases():
    cols = view.columns(80)
    fits = []
    used = view.SCROLLBAR
    for c in cols:
        used += c.width + view.PAD
        if used > 80:
            break
        fits.append(c.key)
    assert "gpu" in fits
    for dropped in ("rss", "pid", "phases"):
        assert dropped not in fits and dropped in [c.key for c in cols]  # scrolled to, not gone
    assert fits.index("gpu") > fits.index("loss")
    wide = [c.key for c in view.columns(160)]
    assert set(wide) == set(view.ORDER) and wide[-1] == "note"
    assert sum(c.width + view.PAD for c in view.columns(160)) + view.SCROLLBAR <= 160



def test_the_column_table_is_one_record_a_column_and_the_table_sort_and_replay_read_it():
    table = columns.COLUMNS
    keys = [c.key for c in table]
    assert len(set(keys)) == len(keys) and [c.key for c in table if c.fills] == ["note"]
    for ranks in ([c.priority for c in table], [c.replay for c in table if c.replay is not None],
                  [c.sort.at for c in table if c.sort]):
        assert len(set(ranks)) == len(ranks)  # no tie: the order where columns must go is the table's word
    # A wide enough terminal shows every record, in its order, and a replay those it can know.
    assert [c.key for c in view.columns(1000, nodes=True)] == keys
    assert [c.key for c in view.columns(1000, nodes=True, replay=True)] == [
        c.key for c in table if c.replay is not None]
    assert {c.key for c in view.columns(80) if c.right} == {c.key for c in table if c.right}
    sorts = sorted((c.sort for c in table if c.sort), key=lambda sort: sort.at)
    assert tuple(sort.name for sort in sorts) == view.SORTS


def test_rows_fold_filter_and_sort():
    st = status("states")
    child = st["workers"][0]["children"][0]["pid"]
    assert [k for k, _ in view.table_rows(st)] == ["w0", f"w0.{child}", "w1", "w2", "w3", "w4"]
    assert [k for k, _ in view.table_rows(st, folded={0})] == ["w0", "w1", "w2", "w3", "w4"]
    assert [k for k, _ in view.table_rows(st, filter_text="failed")] == ["w3"]
    assert [k for k, _ in view.table_rows(st, filter_text="2")] == ["w2"]
    assert [k for k, _ in view.table_rows(st, filter_text=str(st["workers"][1]["pid"]))] == ["w1"]
    assert [k for k, _ in view.table_rows(st, filter_text="illegal memory")] == ["w3"]
    by_state = [k for k, _ in view.table_rows(st, sort="state", folded={0})]
    assert by_state == ["w3", "w1", "w2", "w0", "w4"]  # failed, stalled, paused, running
    losses = {w["rank"]: w["loss"] for w in st["workers"]}
    by_loss = [k for k, _ in view.table_rows(st, sort="loss", folded={0})]
    assert by_loss == [f"w{r}" for r in sorted(losses, key=lambda r: (losses[r], r))]


def test_worker_cells_of_every_state_read_without_colour():
    st = status("states")
    cols = view.columns(200)
    keys = [c.key for c in cols]
    ws = {w["rank"]: w for w in st["workers"]}

    def cells(rank):
        return dict(zip(keys, view.worker_cells(ws[rank], cols, G, folded=False), strict=True))

    failed = cells(3)
    assert segs.plain(failed["state"]) == "x failed"
    assert failed["note"].startswith(ws[3]["cause"]) and "RuntimeError: CUDA error" in failed["note"]
    assert "restarted 1x" in failed["note"] and failed["hb"] == ""  # a dead worker has no heartbeat
    stalled = cells(1)
    stall = ws[1]["stall"]
    assert segs.plain(stalled["state"]) == "! stalled"
    assert f"stalled at step {stall['step']}" in stalled["note"]
    assert f"{stall['kind']} in {stall['wchan']}" in stalled["note"]
    assert f"stuck in {stall['where']}" in stalled["note"] and "wait_for_batch" in stall["where"]
    assert segs.plain(cells(2)["state"]) == "= paused"
    assert "restarted 1x" in cells(4)["note"] and segs.plain(cells(4)["state"]) == "> running"
    assert cells(0)["rank"] == "-0"  # unfolded, with a child
    assert cells(0)["gpu"] == ""  # no GPU in this run: nothing, not "0"


def test_worker_gpu_cell_shows_index_and_the_memory_its_processes_hold():
    st = status("gpu2")
    cols = view.columns(80)
    at = [c.key for c in cols].index("gpu")
    for w in st["workers"]:
        gpu = w["gpu"]
        assert gpu is not None and gpu["shared_with"]  # the scenario's collision
        cell = view.worker_cells(w, cols, G, folded=False)[at]
        assert segs.plain(cell) == f"{gpu['index']} {fmt.size(gpu['mem_bytes'])}{G.collision}"
    # rank 0's memory is its own process's and its child's, as NVML lists them on GPU 0
    procs = st["gpus"][0]["processes"]
    rank0 = sum(p["mem_bytes"] or 0 for p in procs if 0 in (p["rank"], p["child_of"]))
    assert st["workers"][0]["gpu"]["mem_bytes"] == rank0


def test_row_sources_compare_equal_for_equal_data_and_differ_where_it_differs():
    """The table redraws a row when its source compares unequal (tui.render.diff): two copies
    of one status give equal sources; a change of one rank's step changes its row's only."""
    a, b = dict(view.table_rows(status("states"))), dict(view.table_rows(status("states")))
    assert a == b and a["w1"] is not b["w1"]  # equal data in distinct objects
    st = status("states")
    st["workers"][1]["step"] += 1
    c = dict(view.table_rows(st))
    assert [k for k in a if a[k] != c[k]] == ["w1"]
    p = diff.plan({k: view.row_cells(v, view.columns(160), G) for k, v in a.items()}, list(a),
                  [(k, view.row_cells(v, view.columns(160), G)) for k, v in c.items()])
    assert [k for k, _ in p.update] == ["w1"] and not p.add and not p.remove and not p.rebuild


# --------------------------------------------------------------- the GPUs ----
@pytest.mark.parametrize("name", ["gpu2", "gpu8"])
@pytest.mark.parametrize("width", [78, 158])
def test_gpu_rows_one_per_gpu_within_the_width(name, width):
    st = status(name)
    rows = gpu_rows.gpu_rows(st, G, width)
    assert len(rows) == len(st["gpus"])
    worst = [gpu_rows.worst(gpu["alerts"]) for gpu in st["gpus"]]
    assert any(worst) and not all(worst)  # GPUs with alerts and GPUs without
    wide = width > 120  # temperature, power and the history sparklines
    for gpu, row, bad in zip(st["gpus"], rows, worst, strict=True):
        text = segs.plain(row)
        assert segs.width(row) <= width and text.isascii()
        assert text.lstrip().startswith(f"{gpu['index']} ")
        assert fmt.pct(gpu["util_gpu"]) in text  # never "util N/A" when NVML has it
        assert f"{fmt.size(gpu['mem_used'])}/{fmt.size(gpu['mem_total'])}" in text
        assert bad is None or bad["short"] in text  # the worst alert's few words, at every width
        assert (f"{gpu['temperature']}C" in text, f"{gpu['power_w']:.0f}W" in text) == (wide, wide), text


def test_gpu_row_of_the_issue_scenario():
    st = status("gpu2")
    g0, g1 = st["gpus"]
    row0, row1 = (segs.plain(r) for r in gpu_rows.gpu_rows(st, G, 78))
    assert g0["ranks"] == [0, 1] and f"r0,1{G.collision}" in row0  # the collision, marked
    assert f"out {fmt.size(g0['breakdown']['outside'])}" in row0  # the outside processes' memory
    assert "2 ranks share" in row0 and g0["util_gpu"] == 93 and "93%" in row0
    assert g1["util_gpu"] == 0 and " 0%" in row1 and "r" not in row1.split("%", 1)[1]  # idle, no rank
    # the bar tells where the memory goes, in proportion to the breakdown
    bar = "".join(t for t, _ in gpu_rows.mem_bar(g0, 40, G))
    b, total = g0["breakdown"], g0["mem_total"]
    assert len(bar) == 40
    assert abs(bar.count(G.mem["allocated"]) - 40 * b["allocated"] / total) <= 1
    assert abs(bar.count(G.mem["cached"]) - 40 * b["cached"] / total) <= 1
    assert abs(bar.count(G.mem["free"]) - 40 * (total - g0["mem_used"]) / total) <= 1


def test_gpu_rows_say_why_there_are_none():
    st = status("states")
    assert st["gpus"] == [] and st["gpu_status"]
    assert segs.plain(gpu_rows.gpu_rows(st, G, 78)[0]) == f"GPU: {st['gpu_status']}"


def test_alerts_are_whole_and_a_count_past_the_room():
    """Issue 40: a finding is read whole where the user looks: each alert wrapped under its mark,
    never cut; past the room, whole alerts and a last line saying how many more `a` shows."""
    st = status("gpu8")
    items = gpu_rows.alert_items(st)
    n = sum(len(g["alerts"]) for g in st["gpus"]) + len(st["alerts"])
    assert len(items) == n > 3
    assert [s for s, _ in items] == sorted((s for s, _ in items), key=lambda s: gpu_rows.SEVERITY_ORDER[s])
    every = findings.finding_lines(st, G, 400, 100)
    assert [segs.plain(line)[2:] for line in every] == [text for _, text in items]  # all fit: no count
    narrow = findings.finding_lines(st, G, 40, 100)
    assert all(segs.width(line) <= 40 for line in narrow) and len(narrow) > n
    joined = " ".join(segs.plain(line).strip() for line in narrow)
    assert all(text in joined for _, text in items), joined
    first = len(findings.alert_block(*items[0], G, 78))
    lines = findings.finding_lines(st, G, 78, first + 1)
    assert len(lines) == first + 1 and all(segs.width(line) <= 78 for line in lines)
    assert segs.plain(lines[-1]) == f"+{n - 1} more alerts: a shows every one whole"
    one = findings.finding_lines(st, G, 30, 1)  # a short terminal: the first's start, and how to read it
    assert len(one) == 1 and segs.plain(one[0]).endswith(f"(a: whole; +{n - 1} more)") and segs.width(one[0]) <= 30


def test_panel_title_says_how_many_gpus_scroll():
    st = status("gpu8")
    assert "8 GPUs (4 shown, scroll)" in gpu_rows.title(st, G, 80, 4)
    assert "(" not in gpu_rows.title(st, G, 80, 8).split("·")[0]


# ------------------------------------------------------------- the rest ----
def test_header_and_selected_line():
    st = status("gpu2")
    head = [segs.plain(line) for line in view.header_lines(st, G)]
    assert st["run"]["id"] in head[0] and "[running]" in head[0] and "record_worker.py" in head[0]
    assert head[1].startswith(f"{len(st['workers'])} workers: > 2 running")
    line = segs.plain(view.selected_line(st["workers"][0], G))
    assert "GPU 0 " in line and "shared with rank 1" in line


def test_ending_lines_name_each_worker():
    st = status("states")
    lines = view.ending_lines(st)
    assert lines[0].startswith("run ended: exit code ?")
    assert lines[4] == f"rank 3: failed ({st['workers'][3]['cause']})"
    # a cause that starts with its state says it once (issue 31: "rank 2: killed (killed on request (SIGTERM))")
    ended = view.ending_lines(status("ended"))
    assert "rank 2: killed on request (SIGTERM)" in ended and "rank 1: exited (exit 0)" in ended, ended


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


def test_a_small_loss_fits_its_column_at_80():
    """0.0003259 in the 8 cells of LOSS at 80 columns: 0.000326, not 0.00032…"""
    assert [fmt.num_in(v, 8) for v in (0.0003259, 0.00003259, 123456.7, 2.30258)] == [
        "0.000326", "3.26e-05", "1.23e+05", "2.303"]
    assert fmt.num_in(7, 3) == "7" and fmt.num_in(None, 8, na="-") == "-"
    w = dict(status("gpu2")["workers"][0], loss=0.0003259)  # a recorded row late in a training run
    cols = view.columns(80)
    at = [c.key for c in cols].index("loss")
    cell = view.worker_cells(w, cols, G, folded=False)[at]
    assert cell == "0.000326" and len(cell) <= cols[at].width


def test_a_noisy_falling_loss_reads_falling():
    """Issue 20: mnist's loss (2.3 down to hundredths, noisy batch to batch) in the TREND of a
    real run's status: the supervisor smooths the run's loss, the sparkline goes down."""
    for w in status("mnist")["workers"]:
        for width in (8, 10):
            s = bars.sparkline(w["loss_tail"], width, glyphs.UNICODE.spark)
            levels = [glyphs.UNICODE.spark.index(c) for c in s]
            assert levels[0] == 7 and levels[-1] <= 1, s
            assert sum(max(0, b - a) for a, b in zip(levels, levels[1:])) <= 1, s  # at most one small rise


def test_automatic_steps_are_marked_in_the_step_cell_and_said_in_the_selected_line():
    """Issue 21: where a worker's steps come from (recorded: a torch loop with no report())."""
    auto, reported = status("auto"), status("gpu2")
    cols = view.columns(200)
    at = [c.key for c in cols].index("step")
    for g, mark in ((glyphs.ASCII, "a"), (glyphs.UNICODE, "ᵃ")):
        for w in auto["workers"]:
            assert w["steps_from"] == "auto"
            assert segs.plain(view.worker_cells(w, cols, g, folded=False)[at]) == f"{w['step']}{mark}"
            assert f"{mark} steps counted automatically" in segs.plain(view.selected_line(w, g))
    for w in reported["workers"]:
        assert segs.plain(view.worker_cells(w, cols, G, folded=False)[at]) == str(w["step"])
        assert "automatically" not in segs.plain(view.selected_line(w, G))


def test_phase_shares_count_the_automatic_steps_forward_backward_and_optimizer_as_compute():
    s = bars.phase_shares({"data": 1.0, "forward": 2.0, "backward": 3.0, "optimizer": 1.0}, uptime=10)
    assert s == {"data": 1.0, "compute": 6.0, "sync": 0, "other": 3.0}


def test_an_oom_says_who_held_the_memory_first_in_the_rank_row_and_in_its_alert():
    """Issue 33 (tests.record oom): rank 0 died of CUDA OOM on a GPU that rank 1 shares by mistake;
    at 80 columns the selected rank's line and the first alert line name rank 1 before they are cut."""
    st = status("oom")
    w0 = next(w for w in st["workers"] if w["rank"] == 0)
    (finding,) = [a for g in st["gpus"] for a in g["alerts"] if a["kind"] == "oom"]
    assert view.note_text(w0).startswith(w0["memory"]["oom"]) and w0["memory"]["oom"] == finding["oom"]["note"]
    assert finding["oom"]["note"].startswith("CUDA OOM on GPU 0: rank 1 (sharing the GPU) held ")
    assert "rank 1" in segs.plain(segs.cut(view.selected_line(w0, G), 78))
    first = segs.plain(findings.finding_lines(st, G, 78, 3)[0])
    assert first.startswith(f"{G.alert['error']} rank 0 ran out of CUDA memory on GPU 0 and died of it: rank 1 held")
    # a rank that never ran out has no such note
    assert all("memory" not in w for w in st["workers"] if w["rank"] != 0)
    assert all("memory" not in w for name in ("gpu2", "gpu8", "states") for w in status(name)["workers"])


def test_wrap_breaks_at_spaces_indents_and_breaks_a_word_longer_than_a_line():
    ln = segs.line(("! ", "bold"), ("alpha beta gamma", ""), (" deltaepsilonzeta", "red"))
    out = segs.wrap(ln, 10, indent=2)
    assert [segs.plain(x) for x in out] == ["! alpha", "  beta", "  gamma", "  deltaeps", "  ilonzeta"]
    assert out[0][0] == ("!", "bold") and out[-1][-1] == ("ilonzeta", "red")
    assert all(segs.width(x) <= 10 for x in out)
    assert segs.wrap(segs.line(("short", "")), 10) == [segs.line(("short", ""))]


def _in_sight(cols: list, width: int) -> list:
    room, seen = width - view.SCROLLBAR, []
    for c in cols:
        room -= c.width + view.PAD
        if room < 0:
            break
        seen.append(c)
    return seen


def test_at_80_columns_every_rows_note_is_in_sight_and_a_machine_without_gpus_has_no_gpu_column():
    """Issue 40: at 80x24 the NOTE column was out of sight (pause, stall and cause notes showed only
    for the selected row), and an empty GPU column kept its room on a machine without a GPU."""
    st = status("states")
    noted = [w for w in st["workers"] if view.note_text(w)]
    assert {w["state"] for w in noted} >= {"paused", "stalled", "failed"}
    for gpus in (True, False):
        seen = _in_sight(view.columns(80, gpus=gpus), 80)
        keys = [c.key for c in seen]
        assert "note" in keys and ("gpu" in keys) == gpus, keys
        note = seen[keys.index("note")]
        assert note.width >= columns.BY_KEY["note"].width
        for w in noted:  # each row's own note, from its first words
            cell = segs.plain(view.worker_cells(w, [note], G, folded=False)[0])
            assert cell == view.note_text(w) and cell[:note.width - 1] == view.note_text(w)[:note.width - 1]
    assert "gpu" not in [c.key for c in view.columns(200, gpus=False)]  # not even scrolled to
