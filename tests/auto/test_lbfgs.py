"""Issue 31, item 5, through a real supervisor: an LBFGS loop (`optimizer.step(closure)`, the
shape of pytorch/examples' time_sequence_prediction; its own train.py needs matplotlib) whose
closure prints every loss it computes. Each optimizer step's loss shown is the one LBFGS's
step() returns, the closure's first evaluation: the first loss the script printed after its
"STEP: i" line, not the mean of the several it printed."""
from __future__ import annotations

import re

import pytest

from tests.helpers import FIXTURES, need

need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(400)]

STEPS = 3


def printed_steps(out: str) -> list[list[float]]:
    """Each STEP's printed closure losses, in order (the test loss after it is no part of them)."""
    steps: list[list[float]] = []
    for line in out.splitlines():
        if line.startswith("STEP: "):
            steps.append([])
        elif (m := re.fullmatch(r"loss: (\S+)", line)) and steps:
            steps[-1].append(float(m.group(1)))
    return steps


def test_an_lbfgs_steps_loss_is_what_step_returned(headless):
    run = headless(FIXTURES / "lbfgs_sine.py", "--steps", STEPS, "--max-iter", 6, n=1)
    assert run.wait_exit(300) == 0, run.log(0, "stderr")[-2000:]
    printed = printed_steps(run.log(0))
    assert len(printed) == STEPS and all(len(p) > 1 for p in printed), printed  # several evaluations a step
    # One report event a second at most (supervisor.workers.ledger.REPORT_EVENT_S): the steps an
    # event folds in are not each an event, the last step always is.
    reports = run.events("report")
    steps = [r["step"] for r in reports]
    assert steps and steps[-1] == STEPS and steps == sorted(set(steps)), reports
    assert sum(r.get("n", 1) for r in reports) == STEPS, reports
    for r in reports:
        losses = printed[r["step"] - 1]
        assert r["loss"] == losses[0], (r, losses)  # exact: a double, printed in full
        assert r["loss"] != sum(losses) / len(losses)
