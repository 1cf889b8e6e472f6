"""The GPU rows, the GPU screen (`g`, `w`) and the loss plot's scale (`y`) against a real
supervisor with the issue's NVML scenario on the stand-in libnvidia-ml.so.1 (two GPUs; ranks 0
and 1 on GPU 0 at 93%; a worker's child and an outside process there; GPU 1 idle) and
scripted allocator views."""
from __future__ import annotations

import json
import os

from mpwatch.text import fmt
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.gpu import GpuScreen
from mpwatch.tui.widgets.loss_plot import LossPlot
from tests.libnvml import nvml_overlay
from tests.record import cuda_two_gpus, nvml_two_gpus, unused_pid
from tests.tui.conftest import until


def gpu_env(lib, tmp_path) -> dict[str, str]:
    """The supervisor plays the scenario on the stand-in libnvidia-ml.so.1 (testing.libnvml)."""
    cuda = tmp_path / "cuda.json"
    cuda.write_text(json.dumps(cuda_two_gpus()))
    return {**nvml_overlay(lib, tmp_path, nvml_two_gpus(unused_pid())), "MPWATCH_SCRIPTED_CUDA": str(cuda), "CHILD": "1"}


def gpus_known(app) -> bool:
    """The scenario's last frame is in the app's status: both GPUs, the ranks' GPU views, and the
    process outside the run on GPU 0 (its `out` in the row). The screen is drawn from the status
    in the same call that applies it (MpwatchApp.apply_status): once the status has it, so do the
    rows and cells, read without an await between them."""
    st = app.status
    return (len(st["gpus"]) == 2 and st["gpus"][0]["util_gpu"] == 93 and st["gpus"][0].get("breakdown") is not None
            and any(p["rank"] is None and p["child_of"] is None for p in st["gpus"][0]["processes"])
            and all(w["gpu"] and w["gpu"]["allocated"] is not None and w["gpu"]["shared_with"]
                    for w in st["workers"]))


async def test_gpu_rows_and_cells_at_80_columns(tui, tmp_path, libnvml):
    env = gpu_env(libnvml, tmp_path)
    async with tui(n=2, env=env, opts=["--gpu-interval", "0.2"], size=(80, 24)) as (app, pilot, _):
        await until(pilot, lambda: gpus_known(app), what="both GPUs and the ranks' GPU views")
        st = app.status
        rows = app.gpu_panel.body.render().plain.splitlines()
        assert len(rows) == 2 and rows[0].lstrip().startswith("0 ") and rows[1].lstrip().startswith("1 ")
        assert "93%" in rows[0] and " 0%" in rows[1] and "r0,1⚠" in rows[0] and "out " in rows[0]
        keys = [c.key for c in app.table.cols]
        assert keys.index("gpu") < 8  # on screen at 80 columns, not scrolled off
        for w in st["workers"]:
            cell = app.table.get_row(f"w{w['rank']}")[keys.index("gpu")].plain
            assert cell == f"0 {fmt.size(w['gpu']['mem_bytes'])}⚠"


async def test_g_shows_the_gpu_screen_and_w_switches_the_window(tui, tmp_path, libnvml):
    async with tui(n=2, env=gpu_env(libnvml, tmp_path), opts=["--gpu-interval", "0.2"]) as (app, pilot, _):
        await until(pilot, lambda: gpus_known(app), what="both GPUs and the ranks' GPU views")
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, GpuScreen)
        await until(pilot, lambda: screen.loads > 0 and screen.timeline and len(screen.timeline["ticks"]) > 2,
                    what="the GPU timeline")
        charts = screen.charts.render().plain
        assert "GPU 0  memory" in charts and "GPU 1  memory" in charts and "no timeline" not in charts
        ranks = screen.ranks.render().plain.splitlines()
        for w in app.status["workers"]:
            assert any(line.split()[:2] == [str(w["rank"]), str(w["pid"])] for line in ranks)
        outside = screen.outside.render().plain
        assert str(os.getpid()) in outside  # the scenario's outsider is this test (the supervisor's parent)
        assert "another PID namespace" in outside
        alerts = screen.alerts.render().plain
        assert "share this GPU" in alerts and "what to do:" in alerts
        await pilot.press("w")
        assert screen.window == 600 and "last 10 min" in screen.title_bar.render().plain
        await until(pilot, lambda: screen.loads > 1, what="the 10 min timeline")
        await pilot.press("escape")
        assert not isinstance(app.screen, GpuScreen)


async def test_y_switches_the_loss_plot_to_a_log_scale(tui):
    async with tui(n=1) as (app, pilot, _):
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        plot = screen.query_one(LossPlot)
        # 1/(step+1) spans 10x from step 9 on: the plot opens on the log scale (issue 31), y switches
        await until(pilot, lambda: screen.loads > 0 and len(plot.series.get(0) or []) >= 10,
                    what="ten points of the loss history")
        assert plot.log_scale and "log scale (press y for linear)" in plot.render().plain
        await pilot.press("y")
        assert not plot.log_scale and "linear scale (press y for log)" in plot.render().plain
        await pilot.press("y")
        assert plot.log_scale and "log scale" in plot.render().plain
