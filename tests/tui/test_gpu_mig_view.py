"""MIG slices on screen (issue 33), fed the `mig` recording (tests/record.py: an A100 in MIG mode
played by the stand-in libnvidia-ml.so.1, seen as a user: ranks 0 and 1 on one slice, rank 2
on another beside another user's process, the GPU's own memory and process list refused): the
GPU panel, the GPU screen's headings and tables, `ctl status`, the Prometheus labels."""
from __future__ import annotations

from mpwatch.cli.status_text import status_lines
from mpwatch.supervisor.metrics.collector import families
from mpwatch.tui.render import glyphs, gpu_rows, gpu_tables, segs, view
from mpwatch.tui.screens.gpu import chart_lines
from tests.tui.recorded import recording, status

G = glyphs.ASCII
ROOT = "needs root on this MIG GPU"


def plain(lines):
    return [segs.plain(line) for line in lines]


def test_the_panel_has_a_row_per_slice_under_its_gpu():
    st = status("mig")
    for width in (78, 158):
        rows = plain(gpu_rows.gpu_rows(st, G, width))
        assert len(rows) == 4 and all(len(r) <= width for r in rows)
        gpu, a, b, c = rows
        assert gpu.startswith(" 0 ") and "needs root" in gpu and " MIG" in gpu and "%" not in gpu
        assert a.startswith("`3g.40gb") and b.startswith("`2g.20gb") and c.startswith("`1g.10gb")
        assert "37.0G/40.0G" in a and " n/a " in a and "r0,1!" in a and "2 ranks share" in a
        assert "r2 " in b and "out ?" in b  # another user's process there, its memory not available
        assert "out 1.5G" in c and "r" not in c.split("n/a")[1].split("out")[0]
        for row in (a, b, c):  # each slice's columns under its GPU's
            assert row.index(" n/a") == gpu.index(" MIG")
    assert gpu_rows.title(st, G, 80, 4).startswith("1 GPU, 3 MIG slices")
    assert "scroll" in gpu_rows.title(st, G, 80, 3)


def test_the_drivers_reserve_is_neither_the_ranks_nor_free():
    a = status("mig")["gpus"][0]["slices"][0]
    assert a["mem_reserved"] == 256 << 20
    parts = dict(gpu_rows.mem_parts(a))
    assert parts["free"] == a["mem_total"] - a["mem_used"] - a["mem_reserved"]
    assert parts["other"] >= a["mem_reserved"]  # memory no rank holds: the driver's


def test_the_table_names_each_ranks_slice():
    st = status("mig")
    assert [view.gpu_text(w["gpu"]).split()[0] for w in st["workers"]] == ["0:1", "0:1", "0:2"]
    cols = {c.key: c.width for c in view.columns(80, mig=True)}
    assert cols["gpu"] >= len("0:1 19.0G") + 1  # and the collision mark
    assert {c.key: c.width for c in view.columns(80)}["gpu"] == 9  # as it was, without MIG


def test_the_gpu_screen_says_each_refusal_once_in_plain_words():
    rec = recording("mig")
    st = rec["status"]
    text = "\n".join(plain(chart_lines(st, rec["timeline"]["120"], None, 120, 150, True, G)))
    assert text.count(f"memory and process list: {ROOT}") == 1
    assert text.count("utilization and SM % per process: n/a on MIG") == 1
    assert text.count(f"process memory: {ROOT} for another user's process") == 1
    assert "SM clock 1275 of 1410 MHz, held by sw power cap" in text
    assert "Unknown Error" not in text and "Insufficient Permissions" not in text
    slices = [line.strip() for line in text.splitlines() if line.strip().startswith("` MIG ")]
    assert [s.split("  ")[0] for s in slices] == ["` MIG 3g.40gb (GI 1)", "` MIG 2g.20gb (GI 2)",
                                                  "` MIG 1g.10gb (GI 9)"]
    assert "37.0G / 40.0G" in slices[0]
    assert text.count("no rank has this MIG slice as its own") == 1  # the 1g.10gb one
    assert "util" not in text.split("` MIG 3g.40gb")[1].split("\n` ")[0].replace("utilization", "")


def test_the_gpu_screens_tables_name_the_slices():
    st = status("mig")
    ranks = plain(gpu_tables.rank_table(st, 200))
    assert [r.split()[2:4] for r in ranks[1:4]] == [["0", "GI1"], ["0", "GI1"], ["0", "GI2"]]
    assert "ranks 0, 1 all have GPU 0 MIG 3g.40gb (GI 1) as their own" in ranks
    outside = plain(gpu_tables.outside_table(st, 200))
    assert outside[0].startswith("GPU ")
    rows = {r.split()[0]: r for r in outside[1:]}
    assert set(rows) == {"0:2", "0:9"} and " N/A " in rows["0:2"] and "not visible" in rows["0:9"]
    alerts = "\n".join(plain(gpu_tables.alert_list(st, G)))
    assert "GPU 0 MIG 3g.40gb (GI 1): ranks 0 and 1 share this MIG slice" in alerts
    assert "nvidia-smi -L" in alerts  # what to do: a MIG UUID for each rank


def test_ctl_status_lists_each_slice_and_says_what_it_cannot_see():
    lines = status_lines(status("mig"))
    i = next(i for i, line in enumerate(lines) if line.startswith("GPU 0: NVIDIA A100-SXM4-80GB"))
    gpu = lines[i]
    assert "mem N/A/N/A" in gpu and "util N/A" in gpu and "SM 1275/1410 MHz (held: sw power cap)" in gpu
    assert gpu.endswith("MIG, 3 slices")
    rest = lines[i + 1:]
    assert f"    memory and process list: {ROOT}" in rest
    assert "    utilization and SM % per process: n/a on MIG" in rest
    assert sum("n/a on MIG" in line for line in rest) == 1
    slices = [line for line in rest if line.startswith("  MIG ")]
    assert [s.split(":")[0] for s in slices] == ["  MIG 3g.40gb (GI 1)", "  MIG 2g.20gb (GI 2)", "  MIG 1g.10gb (GI 9)"]
    assert "mem 37.0G/40.0G (92%) · ranks 0-1 · MIG-" in slices[0] and "rank 2" in slices[1]
    assert any(line.startswith("  ! GPU 0 MIG 3g.40gb (GI 1): ranks 0 and 1 share this MIG slice") for line in rest)


def test_prometheus_labels_carry_the_slice():
    st = status("mig")
    fams = {f.name: f for f in families(st, "gpu-node-1")}
    used = {(s[0]["GPU_I_ID"], s[0]["GPU_I_PROFILE"]): v for s in fams["mpwatch_gpu_memory_used_bytes"].samples
            for v in [s[2]]}
    slices = st["gpus"][0]["slices"]
    assert used == {(str(s["mig"]["gi"]), s["mig"]["profile"]): float(s["mem_used"]) for s in slices}
    assert all(s[0]["UUID"] == st["gpus"][0]["uuid"] and s[0]["gpu"] == "0"
               for s in fams["mpwatch_gpu_memory_used_bytes"].samples)  # the GPU's, as DCGM's
    assert not fams["mpwatch_gpu_utilization_ratio"].samples  # n/a on MIG: no sample, never 0
    ranks = {s[0]["rank"]: (s[0]["GPU_I_ID"], s[0]["GPU_I_PROFILE"]) for s in fams["mpwatch_worker_step"].samples}
    assert ranks == {"0": ("1", "3g.40gb"), "1": ("1", "3g.40gb"), "2": ("2", "2g.20gb")}
    alerts = {s[0]["kind"]: s[2] for s in fams["mpwatch_alerts"].samples}
    assert alerts["contention"] == 1 and alerts["memory_high"] == 1
