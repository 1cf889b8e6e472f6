"""Dialogs and notices that say what happens (issue 31): the kill dialog says what
supervisor.workers.groups sends (the run's --stop-signal to the rank's own process first,
SIGTERM to the rest of its process group once it ends, SIGKILL to all of it after --grace),
where it said "SIGTERM to its process group"; killing a rank of a process group warns that
its peers cannot go on without it (a 4-rank gloo run ends), as the restart dialog does; and
ranks stopped together by a resize are one notice with their cause, where it said "(their
causes in the table)" over rows whose NOTE is empty (they run again). Fed the ddp and gpu2
recordings at 80x24 and 160x48, and a real run."""
from __future__ import annotations

import pytest

from mpwatch.tui.screens.confirm import ConfirmDialog
from tests.tui.conftest import said, until, worker_of
from tests.tui.recorded import status
from tests.tui.test_snapshots import first_snapshot, recorded_app

SIZES = [(80, 24), (160, 48)]
size_id = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


def dialog_text(screen) -> str:
    return " ".join(" ".join(str(w.render()).split()) for w in screen.query("Label"))


async def kill_rank_1(pilot):
    await first_snapshot(pilot)
    await pilot.press("down", "k")
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog), what="the kill dialog")
    await pilot.pause()


@size_id
async def test_the_kill_dialog_says_what_is_sent_and_warns_of_the_process_group(tmp_path, size):
    opts = status("ddp")["run"]["options"]
    app = recorded_app("ddp", tmp_path)  # three ranks of one gloo process group
    async with app.run_test(size=size) as pilot:
        await kill_rank_1(pilot)
        text = dialog_text(app.screen)
    assert "Kill rank 1 (pid 41100)?" in text
    assert f"{opts['stop_signal']} to its own process first" in text
    assert "process group gets SIGTERM once it ends" in text and "SIGTERM to its process group" not in text
    assert f"SIGKILL after {opts['grace']:g}s (--grace)" in text
    assert "Rank 1 shares a process group with ranks 0,2 (torch.distributed)" in text
    assert "they cannot go on without it, so they end too, and the run with them" in text


async def test_no_warning_for_a_rank_alone(tmp_path):
    app = recorded_app("gpu2", tmp_path)  # two ranks without a process group
    async with app.run_test(size=(80, 24)) as pilot:
        await first_snapshot(pilot)
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="the kill dialog")
        text = dialog_text(app.screen)
    assert "SIGTERM to its own process first" in text and "process group with" not in text


@size_id
def test_kill_dialog_of_a_rank_in_a_process_group(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("ddp", tmp_path), terminal_size=size, run_before=kill_rank_1)


async def test_ranks_stopped_by_a_resize_are_one_notice_with_their_cause(tui):
    async with tui(n=3, opts=["--grace", "2"]) as (app, pilot, run):  # --resize-mode restart
        pids = {w["rank"]: w["pid"] for w in app.status["workers"]}
        await pilot.press("plus")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        run.wait_event("resized", lambda r: r["to"] == 4, timeout=60)
        await until(pilot, lambda: len(app.status["workers"]) == 4 and all(
            w["state"] == "running" and w["pid"] != pids.get(w["rank"]) for w in app.status["workers"]),
            60, what="four ranks running again")
        await until(pilot, lambda: said(app, "resized from 3 to 4"), what="the resize notice")
        told = [t for t, _ in app.messages if "killed" in t]
        assert told and all("stopped for a resize" in t for t in told), told
        assert not said(app, "in the table")
        note = [c.key for c in app.table.cols].index("note")
        assert all(app.table.get_row(f"w{r}")[note].plain.strip() == "" for r in range(3))  # no cause there
        assert worker_of(app, 3)["state"] == "running"
