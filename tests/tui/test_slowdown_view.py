"""Issue 41 in every reader, fed the `slowdown` recording (tests/record.py: three ranks of an
unmodified gloo DDP loop whose Dataset became 3x slower on every rank): the finding as a warning in
the TUI's findings (whole, its head first; its head alone on a short terminal) and in the GPU screen's list with the steps
it has cost; `ctl status`'s pace line; Prometheus' run steps/s and pace ratio (no ratio before the
run has a best: `gpu2`); the merged view of two nodes names the node and keeps the slowest pace;
the replay's fold and the events' line when it ends, from the recorded events."""
from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from mpwatch.cli.status_text import status_lines
from mpwatch.contract import slowdown
from mpwatch.sources.multinode.combine import NodePart, merge
from mpwatch.supervisor.metrics import collector
from mpwatch.text import eventtext, slowdown_text
from mpwatch.tui.render import findings, glyphs, gpu_rows, gpu_tables, segs
from mpwatch.tui.widgets.cells import lines_to_text
from tests.tui.recorded import recording, status

G = glyphs.UNICODE
HEAD = r"the run slowed to \d+\.\d steps/s from \d+\.\d \(0\.\d\dx\) since \d\d:\d\d:\d\d: "


def found(st) -> dict:
    return next(a for a in st["alerts"] if a["kind"] == "slowdown")


def test_the_finding_is_a_warning_cut_to_the_width_and_the_gpu_screen_says_what_it_cost():
    st = status("slowdown")
    a = found(st)
    assert re.match(HEAD + r"every rank's data takes \d\.\dx its own best", a["message"]), a["message"]
    assert ("warning", a["message"]) in gpu_rows.alert_items(st)
    whole = [segs.plain(ln) for ln in findings.finding_lines(st, G, 78, 8)]  # a tall terminal: all of it
    assert 2 <= len(whole) <= 8 and all(len(ln) <= 78 for ln in whole), whole
    assert whole[0].startswith(f"{G.alert['warning']} the run slowed to ")
    assert " ".join(ln[2:].strip() for ln in whole) == a["message"]  # wrapped under its mark, never cut
    some = [segs.plain(ln) for ln in findings.finding_lines(st, G, 78, 4)]  # 80x24: its first lines
    assert some == whole[:4] or (some[:3] == whole[:3] and some[3].endswith("(a: whole)")), some
    [one] = [segs.plain(ln) for ln in findings.finding_lines(st, G, 78, 1)]  # a short terminal: its head
    assert len(one) <= 78 and re.match(r"▲ the run slowed to \d+\.\d steps/s from \d+\.\d \(0\.\d\dx\)", one), one
    listed = lines_to_text(gpu_tables.alert_list(st, G)).plain
    info = a["slowdown"]
    assert f"{a['message']}  (" in listed
    assert f"it has cost the run {info['lost_steps']:.0f} steps (" in listed and "so far)" in listed


def test_ctl_status_says_the_runs_pace_against_its_best():
    st = status("slowdown")
    p = st["run"]["pace"]
    lines = status_lines(st)
    assert f"pace: {p['steps_per_s']:.1f} steps/s, {p['ratio']:.2f}x its best ({p['best_steps_per_s']:.1f} " \
           f"steps/s, held at {slowdown_text.clock(p['best_at'])})" in lines
    assert f"alert: {found(st)['message']}" in lines
    assert not [ln for ln in status_lines(status("gpu2")) if ln.startswith("pace:")]  # no best yet


def _metrics(name: str) -> dict[str, float]:
    text = collector.text(collector.families(status(name), "host")).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("mpwatch_run_") and s.name != "mpwatch_run_info"}


def test_prometheus_has_the_runs_steps_per_second_and_its_ratio_to_its_best():
    st = status("slowdown")
    got = _metrics("slowdown")
    assert got == {"mpwatch_run_steps_per_second": st["run"]["pace"]["steps_per_s"],
                   "mpwatch_run_pace_ratio": st["run"]["pace"]["ratio"]}
    early = _metrics("gpu2")  # ranks with a pace, the run without a best yet: steps/s, no ratio
    paces = [w["pace"] for w in status("gpu2")["workers"] if w["pace"]]
    assert early == {"mpwatch_run_steps_per_second": slowdown.steps_per_s(paces)}
    assert _metrics("ddp") == {}  # no rank with a pace: nothing known


def test_the_merged_view_of_two_nodes_names_the_node_and_keeps_the_slowest_pace():
    fast, slow = status("gpu2"), status("slowdown")
    merged = merge([NodePart(0, "", fast), NodePart(1, "node-1", slow)])
    assert merged is not None
    [a] = [x for x in merged["alerts"] if x["kind"] == "slowdown"]
    assert a["message"].startswith("node 1 (its own GPU and rank numbers): the run slowed to ")
    assert a["slowdown"]["node"] == 1
    assert merged["run"]["pace"] == slow["run"]["pace"]
    both = merge([NodePart(0, "", slow), NodePart(1, "node-1", fast)])
    assert both is not None and both["run"]["pace"] == slow["run"]["pace"]


def test_the_replay_and_the_event_lines_read_the_recorded_events():
    events = recording("slowdown")["events"]
    said = [e for e in events if e["event"] == "alert" and e.get("kind") == "slowdown"]
    assert said and slowdown.read_info(said[-1]["slowdown"]) == said[-1]["slowdown"]
    assert eventtext.line(said[0]) == f"alert: {said[0]['message']}"
