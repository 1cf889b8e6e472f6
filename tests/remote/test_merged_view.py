"""The merged view, fed what the producers sent: the `nodes` recording (tests/record_nodes.py:
two real supervisors, each node's own status, and the merged one MergedSource made of them).
The merge itself (mpwatch/combine.py), the cross-node culprit, unreachable nodes, the GPU
timelines of nodes whose clocks disagree, and the main screen's NODE column, per-node header
and GPU grouping, with SVG snapshots at 80x24 and 160x48."""
from __future__ import annotations

import copy

import pytest

from mpwatch.contract import UNREACHABLE, State
from mpwatch.sources.multinode import combine
from mpwatch.text import fmt
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs, gpu_rows, node_rows, view
from mpwatch.tui.screens.gpu import GpuScreen
from mpwatch.tui.widgets.cells import lines_to_text
from tests.tui.conftest import until
from tests.tui.recorded import RecordedSource, recording

G = glyphs.UNICODE
HOSTS = ("127.0.0.1", "127.0.0.2")


def parts(lost: bool = False) -> list[combine.NodePart]:
    """The two recorded supervisors' own statuses as the merge sees them; with `lost`, as the
    recorded merged view saw them once node 1 stopped answering (its error, how long down)."""
    rec = recording("nodes")
    if lost:
        return [combine.NodePart(n["node"], n["host"], n["status"], n["error"], n["down_for"])
                for n in rec["lost"]["nodes"]]
    return [combine.NodePart(i, HOSTS[i], st) for i, st in enumerate(rec["node_statuses"])]


def lost_node() -> dict:
    """Node 1 as the recorded merged view knew it once it stopped answering."""
    return next(n for n in recording("nodes")["lost"]["nodes"] if n["node"] == 1)


def at_rest(st: dict) -> dict:
    """A merged status without the one value that moves while nothing happens: how long a
    node has been down."""
    st = copy.deepcopy(st)
    for n in st["nodes"]:
        n["down_for"] = None
    return st


def text(lines) -> str:
    return "\n".join(lines_to_text([line]).plain for line in lines)


# ------------------------------------------------------------------ the merge ----
def test_each_rank_gets_its_global_rank_node_and_local_rank():
    st = combine.merge(parts())
    assert [(w["rank"], w["node"], w["local_rank"]) for w in st["workers"]] == [
        (r, r // 4, r % 4) for r in range(8)]
    own = {n: recording("nodes")["node_statuses"][n] for n in (0, 1)}
    for w in st["workers"]:  # every other field is the node's own
        mine = next(x for x in own[w["node"]]["workers"] if x["rank"] == w["local_rank"])
        assert w["pid"] == mine["pid"] and w["step"] == mine["step"] and w["state"] == mine["state"]
    assert [n["base_rank"] for n in st["nodes"]] == [0, 4]
    assert st["run"]["nprocs"] == 8 and st["run"]["counts"] == {"stalled": 8}


def test_gpus_are_numbered_across_nodes_with_their_ranks_mapped():
    st = combine.merge(parts())
    assert [(g["index"], g["node"], g["node_index"], g["ranks"]) for g in st["gpus"]] == [
        (0, 0, 0, [0, 1]), (1, 0, 1, [2, 3]), (2, 1, 0, [4, 5]), (3, 1, 1, [6, 7])]
    for w in st["workers"]:
        assert w["gpu"]["index"] == w["rank"] // 2  # its own GPU, in the merged numbering
    procs = {p["rank"] for g in st["gpus"] for p in g["processes"]}
    assert procs == set(range(8))


def test_the_culprit_is_named_across_nodes_where_no_node_alone_could():
    st = combine.merge(parts())
    s = st["straggler"]
    assert s["culprits"] == [5] and s["waiting"] == [0, 1, 2, 3, 4, 6, 7]
    assert s["text"] == ("the 7 others wait in all_reduce at step 39 for rank 5 on node 1, which is at step 39 "
                         "(in load_batch (ddp_hang.py:20))")
    hangs = [a for a in st["alerts"] if a["kind"] == "hang"]
    assert len(hangs) == 1 and hangs[0]["message"] == s["text"] and hangs[0]["culprits"] == [5]
    # node 1 alone blamed its local rank 1 before its peers on node 0 (who it waits for too)
    own = recording("nodes")["node_statuses"]
    assert own[1]["straggler"]["culprits"] == [1] and not own[0]["straggler"]["culprits"]
    recorded = recording("nodes")["status"]  # what MergedSource made of the same two runs
    assert recorded["straggler"]["culprits"] == [5]
    assert recorded["alerts"][0]["message"].startswith("the 7 others wait in all_reduce at step 39 for rank 5 on node 1")


def test_an_unreachable_node_keeps_its_rows_marked_and_is_never_a_hang():
    why = lost_node()["error"]
    st = combine.merge(parts(lost=True))
    made = recording("nodes")["lost"]["status"]  # what MergedSource made of the same parts (a moment apart)
    assert at_rest(st) == at_rest(made) | {"events_seq": st["events_seq"]}
    lost = [w for w in st["workers"] if w["node"] == 1]
    assert lost and all(w["node_error"] == why for w in lost)
    assert all("node_error" not in w for w in st["workers"] if w["node"] == 0)
    # node 0's ranks are all stalled at one step, nobody behind among those reached: no culprit
    assert st["straggler"]["culprits"] == [] and not [a for a in st["alerts"] if a["kind"] == "hang"]
    n1 = st["nodes"][1]
    assert not n1["reachable"] and n1["down_for"] == lost_node()["down_for"] and n1["error"] == why
    cols = view.columns(160, nodes=True)
    cells = view.worker_cells(lost[0], cols, G, False)
    at = {c.key: i for i, c in enumerate(cols)}
    assert lines_to_text([cells[at["state"]]]).plain == "unreachable" and cells[at["hb"]] == ""
    assert cells[at["node"]] == "1" and cells[at["note"]].startswith(f"node 1 unreachable: {why}")
    # the run's counts take node 1's ranks as unreachable, not as their last known states
    counts = st["run"]["counts"]
    assert counts[UNREACHABLE] == len(lost) and sum(counts.values()) == len(st["workers"])
    assert counts.get(State.STALLED, 0) == len(st["workers"]) - len(lost)


def test_events_take_global_ranks_and_their_node():
    rec = recording("nodes")
    m = combine.maps(parts())
    ev = next(e for e in rec["node_events"][1] if e["event"] == "stalled" and e["rank"] == 1)  # node 1's own
    out = combine.event(ev, m[1])
    assert out["rank"] == 5 and out["node"] == 1 and ev["rank"] == 1
    assert {k: v for k, v in out.items() if k not in ("rank", "node")} == {k: v for k, v in ev.items() if k != "rank"}
    started = [e for e in rec["events"] if e["event"] == "worker_started"]
    assert sorted((e["node"], e["rank"]) for e in started) == [(r // 4, r) for r in range(8)]
    assert [e["seq"] for e in rec["events"]] == list(range(1, len(rec["events"]) + 1))


def test_timelines_of_nodes_whose_clocks_disagree_line_up():
    """The two recorded nodes' own GPU timelines, node 1's clock set 1000 s ahead."""
    tl0, tl1 = recording("nodes")["node_timelines"]
    skewed = copy.deepcopy(tl1)
    for t in skewed["ticks"]:
        t["ts"] += 1000.0
    for k in skewed["marks"]:
        k["ts"] += 1000.0
    m = combine.maps(parts())
    now = max(tl0["ticks"][-1]["ts"], tl1["ticks"][-1]["ts"]) + 5
    out = combine.timeline([(m[0], tl0), (m[1], skewed)], now)
    assert len(out["ticks"]) == max(len(tl0["ticks"]), len(tl1["ticks"])) and out["ticks"][-1]["ts"] == now
    last = out["ticks"][-1]
    assert sorted(g["index"] for g in last["gpus"]) == [0, 1, 2, 3]
    assert sorted(r["rank"] for r in last["ranks"]) == list(range(8))
    assert max(k["ts"] for k in out["marks"]) <= now


# ----------------------------------------------------------------- the screen ----
def test_header_has_a_line_per_node_and_says_why_one_is_unreachable():
    lines = view.header_lines(combine.merge(parts()), G)
    t = text(lines)
    assert "node 0 127.0.0.1  4 workers: ● 0 running  ◆ 4 stalled" in t
    assert "node 1 127.0.0.2  4 workers" in t and "ranks from 4" in t
    n1 = lost_node()
    t = text(view.header_lines(combine.merge(parts(lost=True)), G))
    assert f"node 1 127.0.0.2  ✗ unreachable for {fmt.age(round(n1['down_for']))}: {n1['error']}" in t
    assert "8 workers: ● 0 running  ◆ 4 stalled" in t and "✗ 4 unreachable" in t
    plain = recording("gpu2")["status"]
    assert len(view.header_lines(plain, G)) == 3 and not node_rows.header_lines(plain, G)


def test_many_nodes_fold_into_a_summary_line():
    """Six nodes: the recorded two, node 1 as recorded unreachable, the others like node 0."""
    st = combine.merge(parts(lost=True))
    lost = st["nodes"][1]
    st["nodes"] = [dict(st["nodes"][0], node=i) for i in range(6)]
    st["nodes"][3] = dict(lost, node=3)
    lines = node_rows.header_lines(st, G)
    assert text(lines).splitlines() == [
        "6 nodes: 5 reachable, 1 unreachable",
        f"node 3 127.0.0.2  ✗ unreachable for {fmt.age(round(lost['down_for']))}: {lost['error']} (retrying)"]


def test_gpu_rows_are_grouped_and_labelled_by_node():
    st = combine.merge(parts())
    rows = [lines_to_text([line]).plain for line in gpu_rows.gpu_rows(st, G, 100)]
    assert [r[:6] for r in rows] == ["n0   0", "     1", "n1   0", "     1"]
    assert "r4,5" in rows[2] and "r6,7" in rows[3]
    assert gpu_rows.title(st, G, 100, 4).startswith("4 GPUs on 2 nodes")


def test_node_changes_are_told_once():
    up, down = combine.merge(parts()), combine.merge(parts(lost=True))
    assert node_rows.changes(up, down) == [(f"node 1 (127.0.0.2) unreachable: {lost_node()['error']}; retrying",
                                            "error")]
    assert node_rows.changes(down, down) == []
    assert node_rows.changes(down, up) == [("node 1 (127.0.0.2) is back", "information")]


async def test_app_shows_every_rank_with_its_node():
    app = MpwatchApp(RecordedSource("nodes"), None, glyphs=G, notices=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the recorded snapshot")
        keys = [c.key for c in app.table.cols]
        assert keys[:2] == ["rank", "node"]
        assert [k for k in app.table.order if "." not in k] == [f"w{r}" for r in range(8)]
        row5 = [c.plain.strip() for c in app.table.get_row("w5")]
        assert (row5[0], row5[1], row5[keys.index("state")]) == ("5", "1", "◆ stalled")
        # the header grows to its node lines on the layout after the snapshot: wait for it
        await until(pilot, lambda: app.header.size.height == 5, 10, what="the header's five lines")
        app.table.select_key("w5")
        await until(pilot, lambda: "rank 5 (node 1, local 1)" in str(app.selected_line.render()), 10,
                    what="rank 5's line")
        alerts = str(app.alert_lines.render())
        assert "for rank 5 on node 1, which is at step 39" in alerts


SIZES = [(80, 24), (160, 48)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_of_two_nodes(snap_compare, size):
    async def first(pilot):
        await until(pilot, lambda: pilot.app.snapshots > 0, what="the recorded snapshot")
    app = MpwatchApp(RecordedSource("nodes"), None, glyphs=G, notices=False)
    assert snap_compare(app, terminal_size=size, run_before=first)


def test_gpu_screen_of_two_nodes(snap_compare):
    async def gpus(pilot):
        await until(pilot, lambda: pilot.app.snapshots > 0, what="the recorded snapshot")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(pilot.app.screen, GpuScreen) and pilot.app.screen.loads > 0,
                    what="the GPU timeline")
    app = MpwatchApp(RecordedSource("nodes"), None, glyphs=G, notices=False)
    assert snap_compare(app, terminal_size=(160, 48), run_before=gpus)
