"""Issue 31, item 2 on screen: the `t` screen and the change dialog show the value in force and a
change still pending as two things, fed the `control` recording (a real run: batch set now and
taken by both ranks, lr set for step 999999, a checkpoint taken). At 80x24 the pending change's
"from step S · k/n ranks" is drawn whole. Fails on the code before (VALUE read 0.03, the dialog
"now 0.03", and CHANGED was cut at 80 columns)."""
from __future__ import annotations

import pytest

from mpwatch.tui.screens.tunables import SetTunableDialog, TunablesScreen
from tests.tui.conftest import drawn, until
from tests.tui.test_snapshots import SIZES, first_snapshot, recorded_app

size_id = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


async def tunables(pilot):
    await first_snapshot(pilot)
    await pilot.press("t")
    await until(pilot, lambda: isinstance(pilot.app.screen, TunablesScreen)
                and pilot.app.screen.table.row_count == 4, what="the tunables screen")
    pilot.app.clear_notifications()
    await pilot.pause()


async def lr_dialog(pilot):
    await tunables(pilot)
    await pilot.press("down", "enter")  # batch, then lr
    await until(pilot, lambda: isinstance(pilot.app.screen, SetTunableDialog), what="the change dialog")
    await pilot.pause()


@size_id
def test_the_tunables_screen(snap_compare, tmp_path, size):
    assert snap_compare(recorded_app("control", tmp_path), terminal_size=size, run_before=tunables)


def test_the_change_dialog_of_a_tunable_with_a_pending_change(snap_compare, tmp_path):
    assert snap_compare(recorded_app("control", tmp_path), terminal_size=(80, 24), run_before=lr_dialog)


@size_id
async def test_value_in_force_and_pending_change_are_two_and_whole(tmp_path, size):
    app = recorded_app("control", tmp_path)
    async with app.run_test(size=size) as pilot:
        await tunables(pilot)
        table = app.screen.table
        lr = [c.plain for c in table.get_row("lr")]
        assert lr[2].splitlines() == ["0.1", "→ 0.03"], lr  # the value now, then the one to come
        text = drawn(table)
        assert "from step 999999 · 0/2 ranks" in text, text  # never cut, at 80 columns too
        assert "batch int 64 32 " in text and "from step 999999 · 0/2 ranks" not in lr[4].splitlines()[0]
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, SetTunableDialog), what="the change dialog")
        said = drawn(app.screen.query_one(".dialog-title"))
        assert said.startswith("lr (float): now 0.1; 0.03 from step 999999 (0/2 ranks took it)"), said


async def test_the_steps_on_the_screen_are_the_ones_the_script_printed(tmp_path):
    """Issue 31, item 7: "from step S" and "taken at step S" are the script's own steps (the
    recorded control_loop.py prints `STEP s ... batch=64` at the top of the first step that reads
    64, and `CHECKPOINT s` where should_checkpoint() was True); a value's step was one behind."""
    from tests.tui.recorded import recording

    logs = recording("control")["logs"]
    app = recorded_app("control", tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await tunables(pilot)
        batch = [c.plain for c in app.screen.table.get_row("batch")][4]
        ckpt = drawn(app.screen.checkpoints)
    step = int(batch.split("from step ")[1].split(" ")[0])
    taken = int(ckpt.split("taken at step ")[1].split()[0])
    for rank in ("0", "1"):
        out = logs[rank]["stdout"]
        assert next(ln for ln in out if "batch=64" in ln).startswith(f"STEP {step} "), out
        assert f"CHECKPOINT {taken}" in out, out
