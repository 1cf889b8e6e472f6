"""The supervisor's own bounds on what a rank declares (issue 39, item 7), whatever its worker
side does: a rank that sends 20,000 new phase names a batch (one a lone surrogate), 512 new
metric names and a tunable of a name too long keeps PHASES_KEPT phases and METRICS_KEPT metrics,
is noted for the rest, and grows neither /metrics (which answers, in both formats), nor the
honest rank's pace, nor events.jsonl, nor `ctl status --json`."""
from __future__ import annotations

import json
import os

import pytest

from mpwatch.supervisor.workers.batch_check import METRICS_KEPT, PHASES_KEPT
from tests.faults.conftest import FAULTS
from tests.helpers import wait_for
from tests.supervisor.test_metrics import free_port, get

pytestmark = pytest.mark.timeout(180)
BATCHES = 12  # 240,000 phase names, 6144 metric names


def test_a_rank_declaring_past_every_bound_grows_nothing(headless):
    port = free_port()
    run = headless(FAULTS / "declares.py", BATCHES, n=2, opts=["--metrics-port", port])
    wait_for(lambda: "FLOODED" in run.log(1), 120, what="rank 1's flood")
    w = wait_for(lambda: (lambda w: w if w["bad_inputs"]["count"] >= 2 * BATCHES else None)(run.worker(1))
                 if "bad_inputs" in run.worker(1) else None, what="rank 1's notes")
    assert len(w["phases"]) <= PHASES_KEPT and "\ud800" not in w["phases"], len(w["phases"])
    assert len(w["metrics"]) <= METRICS_KEPT, len(w["metrics"])
    assert "past the" in w["bad_inputs"]["why"]
    s0 = run.worker(0)["step"]
    wait_for(lambda: (lambda w: w["pace"] is not None and w["step"] >= s0 + 30)(run.worker(0)), 60,
             what="rank 0's pace after the flood")
    pace = run.worker(0)["pace"]
    assert set(pace["phases"]) <= {"data", "compute", "other"}, pace["phases"]
    assert len(pace["relative"]) <= PHASES_KEPT + 3, len(pace["relative"])
    for accept in (None, "application/openmetrics-text; version=1.0.0"):
        code, text = get(f"http://127.0.0.1:{port}/metrics", accept=accept)
        assert code == 200 and len(text) < 200_000, (code, len(text))
        assert text.count("mpwatch_worker_phase_seconds{") <= 2 * (PHASES_KEPT + 1)
    status = run.ctl("status", "--json").stdout
    assert len(status) < 300_000, len(status)
    assert json.loads(status)["tunables"] == []  # its tunable's name was refused
    run.ctl("stop")
    assert run.wait_exit(60) == 1
    assert os.path.getsize(run.run_dir / "events.jsonl") < 2_000_000
    run.assert_gone()
