"""Issue 33 in the TUI, with Pilot against a real supervisor running tests/fixtures/cuda_oom.py on the
scripted torch: `M` asks the selected rank for torch's CUDA memory snapshot (ctl memory RANK), and
its row then says where it is."""
from __future__ import annotations

from tests.supervisor.test_memory_snapshot import OOM, env
from tests.tui.conftest import said, until


async def test_m_in_the_tui_snapshots_the_selected_rank(tui, tmp_path):
    async with tui(n=2, script=OOM, args=(str(tmp_path / "go"),), env=env(tmp_path)) as (app, pilot, run):
        await pilot.press("M")
        await until(pilot, lambda: said(app, "CUDA memory snapshot asked of rank 0 "), what="the reply")
        (ev,) = run.wait_event("memory_written", timeout=60)
        assert ev["rank"] == 0 and run.events("memory_requested")[0]["by"].startswith("tui ")
        await until(pilot, lambda: (app.status["workers"][0].get("memory") or {}).get("snapshot"),
                    what="the rank's row to say where")
        assert said(app, f"rank 0: CUDA memory snapshot written, {ev['path']}")
