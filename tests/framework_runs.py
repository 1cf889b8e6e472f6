"""Clients nobody here wrote, one real run each a session, read by two tests: a Lightning
Trainer.fit (tests/fixtures/lightning_fit.py) and a Hugging Face Trainer
(tests/fixtures/hf_trainer_fit.py), two ranks over gloo on the CPU. Each run has two acts:

1. no line of mpwatch's: the steps and losses mpwatch counts itself, until a hang planted after
   step HANG_AT is `stalled` there with its frame named (tests/auto/test_frameworks.py);
2. the hang released, the checkpoint callback of docs/control.md armed: `ctl checkpoint all`
   is taken at one step on both ranks, and the framework saves that step
   (tests/supervisor/test_control_frameworks.py).

They were four runs (each test started its own); every act is kept, with its error when it
failed, for its own test. Each run is an xdist group of its own (tests/conftest.py), so the two
lanes may split them. Their fixtures are imported by tests/conftest.py."""
from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mpwatch.sources.local import Client
from tests.helpers import FIXTURES, HeadlessRun, internal_errors, need, wait_for

HANG_AT = 15


class HangAct:
    """What mpwatch showed, and what the framework logged, with rank 0 stalled in the planted hang."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.worker: dict = {}  # rank 0 of the status, stalled in the planted hang
        self.others: list[dict] = []  # the other ranks of that status
        self.dump = ""  # rank 0's stall dump
        self.shown: dict[int, dict[int, float]] = {}  # each rank's loss history (the socket's): {step: loss}
        self.logged: dict[int, float] = {}  # what the framework logged: {step: loss}

    def play(self, run: HeadlessRun, read_logged: Callable[[HeadlessRun], dict[int, float]]) -> None:
        def stalled():
            ws = run.status()["workers"]
            w = ws[0]
            where = (w["stall"] or {}).get("where") or ""
            return ws if w["state"] == "stalled" and "wait_for_the_lost_batch" in where else None
        ws = wait_for(stalled, 240, what="rank 0 stalled in the planted hang, its frame named")
        self.worker, self.others = ws[0], ws[1:]
        self.dump = (run.run_dir / self.worker["stall"]["dump"]).read_text(errors="replace")
        with Client.at(run.run_dir) as client:  # as the detail view draws them
            self.shown = {w["rank"]: {int(s): loss for s, loss in client.history(w["rank"])} for w in ws}
        self.logged = read_logged(run)


class CheckpointAct:
    """The hang released: `ctl checkpoint all` asked once both ranks poll for it, and taken."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.asked = 0  # the step `ctl checkpoint all` said it would be taken at
        self.taken: list[dict] = []  # the checkpoint_taken events (one a rank)
        self.at = 0  # the step both took it at
        self.log0 = ""  # rank 0's stdout once the framework said it saved

    def play(self, run: HeadlessRun, release: Path) -> None:
        release.write_text("")
        wait_for(lambda: all((w["step"] or 0) > HANG_AT and w["polls_checkpoint"]
                             for w in run.status()["workers"]),
                 timeout=300, what="both ranks training past the hang, the checkpoint callback armed")
        said = run.ctl("checkpoint", "all").stdout
        m = re.match(r"checkpoint asked of ranks 0-1 at step (\d+)", said)
        assert m, said
        self.asked = int(m.group(1))
        self.taken = run.wait_event("checkpoint_taken", timeout=180, count=2)
        self.at = max(e["step"] for e in self.taken)
        wait_for(lambda: f"SAVED {self.at}" in run.log(0), timeout=180, what="the framework's save")
        # the save is done in the step's callbacks: once both ranks are two steps on, it is on disk
        wait_for(lambda: all((w["step"] or 0) >= self.at + 2 for w in run.status()["workers"]), timeout=180,
                 what="both ranks past the saved step")
        self.log0 = run.log(0)


class FrameworkRun:
    """One framework's run and its two acts (see the module's docstring)."""

    def __init__(self, folder: Path, script: str, args: list,
                 read_logged: Callable[[HeadlessRun], dict[int, float]], env: dict | None = None) -> None:
        self.folder = folder
        self.release = folder / "release"  # the planted hang waits for this file
        self.run = HeadlessRun(folder, FIXTURES / script, "--hang-at", HANG_AT, "--release", self.release,
                               *args, n=2, opts=["--stall-timeout", "5"], env=env)
        self.read_logged = read_logged
        self.hang = HangAct()
        self.checkpoint = CheckpointAct()
        self.bugs: list[str] = []  # the supervisor's internal alerts and logged bugs (tests.helpers)

    def play(self) -> None:
        self.run.start()
        try:
            self.hang.play(self.run, self.read_logged)
        except Exception as exc:  # noqa: BLE001 - kept for the act's own test: the next act still runs
            self.hang.error = exc
        try:
            self.checkpoint.play(self.run, self.release)
        except Exception as exc:  # noqa: BLE001 - as above
            self.checkpoint.error = exc
        if self.run.proc is not None and self.run.proc.poll() is None:
            self.run.ctl("stop", check=False)
            self.run.wait_exit(60)
        self.bugs = internal_errors(self.folder)

    def act(self, which: HangAct | CheckpointAct) -> None:
        """Fail the test of an act that did not play out, with its own error, or of a run whose
        supervisor had a bug (the autouse check sees only the test's own tmp_path)."""
        if which.error is not None:
            raise which.error
        assert not self.bugs, self.bugs


def _csv_losses(folder: Path) -> Callable[[HeadlessRun], dict[int, float]]:
    """Lightning logs a training step's loss under the global step before that optimizer step."""
    def read(run: HeadlessRun) -> dict[int, float]:
        with open(next(folder.rglob("metrics.csv"))) as f:
            rows = csv.DictReader(f)
            return {int(r["step"]) + 1: float(r["train_loss"]) for r in rows if r.get("train_loss")}
    return read


def _log_losses(run: HeadlessRun) -> dict[int, float]:
    import json

    return {rec["step"]: rec["loss"] for line in run.log(0).splitlines() if line.startswith("LOG ")
            for rec in [json.loads(line[4:])]}


def _played(made: FrameworkRun):
    try:
        made.play()
        yield made
    finally:
        made.run.cleanup()


@pytest.fixture(scope="session")
def lightning_run(tmp_path_factory):
    need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
    pytest.importorskip("lightning", reason="the test extra installs lightning (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("lightning")
    yield from _played(FrameworkRun(folder, "lightning_fit.py", ["--csv-dir", folder / "pl"],
                                    _csv_losses(folder / "pl")))


@pytest.fixture(scope="session")
def hf_run(tmp_path_factory):
    need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
    pytest.importorskip("transformers", reason="the test extra installs it (pip install -e '.[test]')")
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (the test extra)")
    folder = tmp_path_factory.mktemp("hugging-face")
    yield from _played(FrameworkRun(folder, "hf_trainer_fit.py", ["--out", folder / "hf"], _log_losses,
                                    env=dict(os.environ, HF_HUB_OFFLINE="1")))
