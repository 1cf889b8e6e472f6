"""Issue 21 on clients nobody here wrote: Lightning's Trainer.fit and Hugging Face's
transformers.Trainer, each on a tiny model built on the CPU (no download), with no line of
mpwatch's. The steps and losses mpwatch shows equal what the framework itself logged, and a
hang planted in a callback at step 15 is `stalled` at step 15 with its frame named."""
from __future__ import annotations

import csv
import json
import os

import pytest

from mpwatch.sources.local import Client
from tests.helpers import FIXTURES, wait_for

pytest.importorskip("torch", reason="automatic steps are torch's (pip install -e '.[demo]')")
pytestmark = pytest.mark.torch

HANG_AT = 15


def stalled_at_the_planted_hang(run) -> dict:
    def stalled():
        w = run.worker(0)
        where = (w["stall"] or {}).get("where") or ""
        return w if w["state"] == "stalled" and "wait_for_the_lost_batch" in where else None
    return wait_for(stalled, 240, what="rank 0 stalled in the planted hang, its frame named")


def shown(run) -> dict[int, float]:
    """Every (step, loss) mpwatch holds for rank 0: its loss history, as the detail view draws it."""
    with Client.at(run.run_dir) as client:
        return {int(s): loss for s, loss in client.history(0)}


def compare(shown_losses: dict[int, float], logged: dict[int, float]) -> None:
    """The framework logs a step after its callbacks ran: the planted hang keeps it from logging
    step 15, which mpwatch has from the optimizer step itself."""
    assert sorted(shown_losses) == list(range(1, HANG_AT + 1)), sorted(shown_losses)  # every step, none folded
    assert sorted(logged) == list(range(1, HANG_AT)), sorted(logged)
    for step, loss in logged.items():
        assert shown_losses[step] == pytest.approx(loss, rel=1e-6, abs=1e-7), step


def test_lightning_fit(headless, tmp_path):
    pytest.importorskip("lightning", reason="the test extra installs lightning (pip install -e '.[test]')")
    script = FIXTURES / "lightning_fit.py"
    assert "mpwatch" not in script.read_text().split('"""', 2)[2]
    run = headless(script, "--hang-at", HANG_AT, "--csv-dir", tmp_path / "logs", n=1, opts=["--stall-timeout", "3"])
    w = stalled_at_the_planted_hang(run)
    assert w["step"] == HANG_AT and w["stall"]["step"] == HANG_AT and w["steps_from"] == "auto"
    assert "on_train_batch_end" in open(run.run_dir / w["stall"]["dump"]).read()
    rows = list(csv.DictReader(open(next((tmp_path / "logs").rglob("metrics.csv")))))
    # Lightning logs a training step's loss under the global step before that optimizer step
    logged = {int(r["step"]) + 1: float(r["train_loss"]) for r in rows if r.get("train_loss")}
    compare(shown(run), logged)


def test_hugging_face_trainer(headless, tmp_path):
    pytest.importorskip("transformers", reason="the test extra installs transformers (pip install -e '.[test]')")
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (the test extra)")
    script = FIXTURES / "hf_trainer_fit.py"
    assert "mpwatch" not in script.read_text().split('"""', 2)[2]
    run = headless(script, "--hang-at", HANG_AT, "--out", tmp_path / "out", n=1, opts=["--stall-timeout", "3"],
                   env=dict(os.environ, HF_HUB_OFFLINE="1"))
    w = stalled_at_the_planted_hang(run)
    assert w["step"] == HANG_AT and w["stall"]["step"] == HANG_AT and w["steps_from"] == "auto"
    assert "on_step_end" in open(run.run_dir / w["stall"]["dump"]).read()
    logged = {rec["step"]: rec["loss"] for line in run.log(0).splitlines() if line.startswith("LOG ")
              for rec in [json.loads(line[4:])]}
    compare(shown(run), logged)
