"""Issue 21 on clients nobody here wrote: Lightning's Trainer.fit and Hugging Face's
transformers.Trainer, each on a tiny model built on the CPU (no download), two ranks over gloo,
with no line of mpwatch's. The steps and losses mpwatch shows equal what the framework itself
logged, and a hang planted in a callback at step 15 is `stalled` at step 15 with its frame named.
The runs are shared with tests/supervisor/test_control_frameworks.py, which releases the hang and
arms docs/control.md's callback after these tests' act (tests/framework_runs.py)."""
from __future__ import annotations

import pytest

from tests.framework_runs import HANG_AT
from tests.helpers import FIXTURES, need

need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(600)]  # the shared run, when it starts here


def compare(shown_losses: dict[int, float], logged: dict[int, float]) -> None:
    """The framework logs a step after its callbacks ran: the planted hang keeps it from logging
    step 15, which mpwatch has from the optimizer step itself."""
    # every step, none folded
    assert sorted(shown_losses) == list(range(1, HANG_AT + 1)), sorted(shown_losses)
    assert sorted(logged) == list(range(1, HANG_AT)), sorted(logged)
    for step, loss in logged.items():
        assert shown_losses[step] == pytest.approx(loss, rel=1e-6, abs=1e-7), step


def untouched(script: str) -> None:
    """Nothing of mpwatch's in the script: it reaches mpwatch only through docs/control.md's
    callback, exec'd once the planted hang is released (after this act)."""
    code = (FIXTURES / script).read_text().split('"""', 2)[2]
    assert "import mpwatch" not in code and "mpwatch." not in code


def stalled_at_the_planted_hang(act) -> None:
    w = act.worker
    assert w["step"] == HANG_AT and w["stall"]["step"] == HANG_AT and w["steps_from"] == "auto"
    for other in act.others:  # DDP steps both ranks together: both hang at the same step
        assert other["step"] == HANG_AT and other["steps_from"] == "auto", other


def test_lightning_fit(lightning_run):
    lightning_run.act(lightning_run.hang)
    untouched("lightning_fit.py")
    act = lightning_run.hang
    stalled_at_the_planted_hang(act)
    assert "on_train_batch_end" in act.dump
    compare(act.shown[0], act.logged)  # Lightning logs rank 0's own loss (no sync_dist)


def test_hugging_face_trainer(hf_run):
    hf_run.act(hf_run.hang)
    untouched("hf_trainer_fit.py")
    act = hf_run.hang
    stalled_at_the_planted_hang(act)
    assert "on_step_end" in act.dump
    # the Trainer logs the mean of the ranks' losses (it gathers them): so does mpwatch's, rank by rank
    steps = sorted(act.shown[0])
    assert sorted(act.shown[1]) == steps
    compare({s: (act.shown[0][s] + act.shown[1][s]) / 2 for s in steps}, act.logged)
