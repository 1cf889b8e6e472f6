"""Restarting one rank of a process group (issue 20, item 4), against a real 3-rank gloo run
(torch): the dialog says before the choice that the rank shares a process group and offers to
restart all; `R` restarts all (asking first); `-` and `+` that restart every worker ask first."""
import pytest

from mpwatch.tui.screens.confirm import ChoiceDialog, ConfirmDialog
from tests.helpers import FIXTURES, need
from tests.tui.conftest import said, until, worker_of

need("torch", "a process group needs torch (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]
DDP = FIXTURES / "ddp_steps.py"


def dialog_text(screen) -> str:
    return " ".join(str(w.render()) for w in screen.query("Label, Button"))


async def test_every_restart_asks_first_and_r_on_a_rank_of_a_process_group_offers_to_restart_all(tui):
    """One run for both parts (a 3-rank torch start is seconds of CPU): every choice cancelled
    first, nothing happening; then `r` on rank 1, whose dialog warns, and all three restarted."""
    async with tui(n=3, opts=["--grace", "2"], script=DDP, args=("100000",)) as (app, pilot, run):
        await until(pilot, lambda: all(w.get("dist") for w in app.status["workers"]), 120,
                    what="every rank in its process group")
        pids = {w["rank"]: w["pid"] for w in app.status["workers"]}
        # `R`, and `-` and `+` that restart every worker, ask first; cancelled, nothing happens
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmDialog) and "Restart all 3 workers?" in dialog_text(app.screen)
        await pilot.press("n")
        assert said(app, "restart of all workers cancelled")
        for key, n in (("minus", 2), ("plus", 4)):
            await pilot.press(key)
            assert isinstance(app.screen, ConfirmDialog)
            assert f"Resize to {n} workers, restarting every worker?" in dialog_text(app.screen)
            await pilot.press("n")
            assert said(app, f"resize to {n} cancelled")
        await pilot.press("down", "r")
        assert isinstance(app.screen, ChoiceDialog)
        text = dialog_text(app.screen)
        assert "Restart rank 1" in text and "shares a process group with ranks 0,2" in text
        assert "their collectives fail" in text and "[a] Restart all 3" in text and "[o] Only rank 1" in text
        await pilot.press("escape")  # the choice dialog, cancelled
        assert said(app, "restart of rank 1 cancelled")
        assert not run.events("resized") and not run.events("worker_exited") and not run.events("restarted")
        assert worker_of(app, 1)["state"] == "running" and worker_of(app, 1)["pid"] == pids[1]

        # `r` on rank 1 again, and [a]: all three restart together
        await pilot.press("r")
        assert isinstance(app.screen, ChoiceDialog)
        await pilot.press("a")
        run.wait_event("restarted", count=3, timeout=120)
        await until(pilot, lambda: said(app, "restarting rank 0") and said(app, "restarting rank 2"),
                    what="the reply for all three")
        await until(pilot, lambda: all(w["pid"] != pids[w["rank"]] and w["state"] == "running" and w["step"] is not None
                                       for w in app.status["workers"]), 120, what="three new ranks stepping together")
        assert not [e for e in run.events("worker_exited") if e["state"] == "failed"]  # nobody's collective failed
