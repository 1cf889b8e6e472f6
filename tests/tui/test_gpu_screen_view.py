"""The GPU screen's pure layers (charts over time, the rank and outside tables, the alert
list), fed the statuses and GPU timelines recorded from real runs (tests/record.py)."""
from __future__ import annotations

import pytest

from mpwatch.text import fmt
from mpwatch.tui.render import glyphs, gpu_charts, gpu_tables, segs
from mpwatch.tui.screens.gpu import chart_lines
from tests.tui.recorded import recording, status

G = glyphs.ASCII


def plain(lines):
    return [segs.plain(line) for line in lines]


def test_rank_table_has_torch_and_nvml_views_of_each_rank():
    st = status("gpu2")
    rows = plain(gpu_tables.rank_table(st, 200))
    head = rows[0].split()
    assert head == [n for n, _ in gpu_tables.RANK_COLS]
    for w in st["workers"]:
        wg = w["gpu"]
        row = next(r for r in rows[1:] if r.split()[:2] == [str(w["rank"]), str(w["pid"])])
        cells = row.split()
        assert cells[2:4] == [str(wg["index"]), wg["uuid"][:gpu_tables.UUID_CHARS]]  # its GPU, by UUID
        assert cells[4:10] == [fmt.size(wg[k]) for k in ("allocated", "reserved", "peak", "mem_bytes",
                                                        "other_bytes", "fragmentation")]
        assert cells[10:] == [str(wg["alloc_retries"]), str(wg["ooms"]), f"{wg['sm_util']}%"]
    child = next(p for p in st["gpus"][0]["processes"] if p["child_of"] == 0)
    assert any(r.split()[:2] == [str(child["pid"]), "0"] and fmt.size(child["mem_bytes"]) in r for r in rows)
    assert "ranks 0, 1 all have GPU 0 as their own" in rows[-1]


def test_rank_table_says_na_not_zero_where_unknown():
    st = status("gpu2")
    wg = st["workers"][1]["gpu"]
    wg["sm_util"] = None
    wg["allocated"] = None
    row = plain(gpu_tables.rank_table(st, 200))[3]
    assert row.split()[0] == "1" and row.split()[4] == "N/A" and row.split()[-1] == "N/A"


def test_outside_table_names_who_and_since_when_and_the_invisible():
    st = status("gpu2")
    rows = plain(gpu_tables.outside_table(st, 300))
    outside = [p for p in st["gpus"][0]["processes"] if p["rank"] is None and p["child_of"] is None]
    assert len(rows) == 1 + len(outside) and len(outside) == 2
    now = gpu_tables.now_of(st)
    for p, row in zip(outside, rows[1:], strict=True):
        assert row.split()[:2] == ["0", str(p["pid"])] and fmt.size(p["mem_bytes"]) in row
        assert f"{fmt.age(now - p['since'])} ago" in row
        if p["visible"]:
            assert p["user"] in row and p["cmd"] in row
        else:
            assert "another PID namespace" in row and "--pid=host" in row
    assert plain(gpu_tables.outside_table(status("gpu8"), 100))[1] == "no process outside the run holds GPU memory"


def test_alert_list_has_every_alert_in_full_with_its_hint():
    st = status("gpu8")
    text = "\n".join(plain(gpu_tables.alert_list(st, G)))
    alerts = [a for g in st["gpus"] for a in g["alerts"]]
    assert alerts
    for a in alerts:
        assert a["message"] in text and f"what to do: {a['hint']}" in text


@pytest.mark.parametrize("window", gpu_charts.WINDOWS)
def test_memory_chart_stacks_ranks_under_the_capacity_line(window):
    rec = recording("gpu2")
    tl = rec["timeline"][str(int(window))]
    ticks = tl["ticks"]
    now = ticks[-1]["ts"]
    lines = plain(gpu_charts.memory_chart(ticks, 0, now, window, 80, 8, G))
    assert len(lines) == 9 and all(len(line) == 80 for line in lines)
    assert lines[0].strip().startswith(fmt.size(ticks[-1]["gpus"][0]["mem_total"]))
    assert set(lines[0][gpu_charts.AXIS:]) == {G.capacity}
    last = [line[-1] for line in lines[1:]][::-1]  # the newest column, bottom up
    # GPU 0 at the last tick: rank 0, then rank 1, then the rest, in proportion to NVML's bytes
    g0 = ticks[-1]["gpus"][0]
    r = {x["rank"]: x["nvml"] for x in ticks[-1]["ranks"]}
    per_row = g0["mem_total"] / 8
    assert last[0] == G.stack[0] and last[int(r[0] / per_row) + 1] in (G.stack[1], G.stack[0])
    filled = sum(c != " " for c in last)
    assert abs(filled - g0["mem_used"] / per_row) <= 1
    assert set("".join(lines[1:])[gpu_charts.AXIS:]) - {" "}  # drawn at all
    idle = plain(gpu_charts.memory_chart(ticks, 1, now, window, 80, 8, G))
    assert all(set(line[gpu_charts.AXIS:]) == {" "} for line in idle[1:])  # GPU 1: nothing held


def test_util_chart_and_marks():
    tl = recording("gpu2")["timeline"]["120"]
    ticks, marks = tl["ticks"], tl["marks"]
    now = ticks[-1]["ts"]
    util = plain(gpu_charts.util_chart(ticks, 0, now, 120, 80, 4, G))
    assert ticks[-1]["gpus"][0]["util_gpu"] == 93
    assert [line[-1] for line in util] == [G.spark[int(0.72 * len(G.spark))], G.spark[-1], G.spark[-1], G.spark[-1]]
    line = segs.plain(gpu_charts.marks_line(marks, 0, now, 120, 80, G))
    mine = [m for m in marks if m["gpu"] in (None, 0)]
    assert {m["kind"] for m in mine} >= {"alert", "alloc_retry", "proc_started"}  # the recording has each
    # Each mark in its cell of the time axis; where several share one, the most telling shows.
    cols, order = 80 - gpu_charts.AXIS, gpu_charts.MARK_ORDER
    cells: dict[int, list[str]] = {}
    for m in mine:
        cells.setdefault(int((m["ts"] - (now - 120)) / 120 * cols), []).append(m["kind"])
    assert {line[gpu_charts.AXIS + c] for c in cells} == {G.mark[min(ks, key=order.index)] for ks in cells.values()}
    assert all(line[gpu_charts.AXIS + c] == G.mark[min(ks, key=order.index)] for c, ks in cells.items())
    assert G.mark["alert"] in line and G.mark["alloc_retry"] in line
    recent = plain(gpu_charts.recent_marks(marks, 0, now, 120, 3))
    assert [r.split(" ago ", 1)[1] for r in recent] == [m["text"] for m in marks if m["gpu"] in (None, 0)][-3:]


def test_columns_leave_a_gap_before_the_run_and_none_inside_it():
    tl = recording("gpu2")["timeline"]["600"]
    ticks = tl["ticks"]
    now = ticks[-1]["ts"]
    shown = gpu_charts.columns_of(ticks, now, 600, 100)
    first = next(i for i, t in enumerate(shown) if t is not None)
    assert first > 90  # a 10 s run in a 10 min window: the left is empty
    assert all(t is not None for t in shown[first:])


def test_chart_lines_say_why_there_is_no_timeline():
    st = status("gpu2")
    g0 = st["gpus"][0]
    lines = plain(chart_lines(st, None, "the run has ended", 120, 80, False, G))
    assert lines.count("  no timeline: the run has ended") == 2  # one per GPU
    head = f"GPU 0  memory {fmt.size(g0['mem_used'])} / {fmt.size(g0['mem_total'])}  util {g0['util_gpu']}%"
    assert any(line.startswith(head) and "NVIDIA H100" in line for line in lines), lines
