"""Issue 33, the worker side of the CUDA memory forensics (mpwatch.worker.cuda_memory): what a
rank sends when CUDA runs out of memory, read off a real channel, through torch's own calls on
the scripted torch (testing.torch_cuda; tests/fixtures/cuda_oom.py runs the same code on a
GPU in scripts/gpu-check); and the arming after a real `import torch`, which torch holds until
the process initialises CUDA (no GPU needed to see it queued)."""
from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys

import pytest

from mpwatch.contract import protocol
from tests.helpers import FIXTURES, need, wait_for
from tests.memory.hub import Hub

GiB, MiB = 1 << 30, 1 << 20
OOM = FIXTURES / "cuda_oom.py"


def scenario(tmp_path, **frame) -> str:
    """Rank 0 on an 80 GiB GPU: 38.5 GiB allocated, 64 MiB more reserved, 1.25 GiB free on the GPU."""
    base = {"at": 0, "device": 0, "uuid": "GPU-5a1c9e2b", "allocated": int(38.5 * GiB),
            "reserved": int(38.5 * GiB) + 64 * MiB, "max_allocated": 39 * GiB, "total": 80 * GiB,
            "free": int(1.25 * GiB)}
    path = tmp_path / "cuda.json"
    path.write_text(json.dumps({"ranks": {"0": [{**base, **frame}]}}))
    return str(path)


def run_oom(tmp_path, hub: Hub, *, history: str | None, catch: bool = False) -> subprocess.Popen[str]:
    memory = tmp_path / "memory"
    memory.mkdir(mode=0o700)
    go = tmp_path / "go"
    go.touch()
    env = {"MPWATCH_SCRIPTED_CUDA": scenario(tmp_path), protocol.ENV_CUDA_OOM: "1",
           protocol.ENV_MEMORY_DIR: str(memory), "OOM_RANKS": "0", "CHUNK_MB": "2048", "HOLD_MB": "256"}
    if history:
        env[protocol.ENV_CUDA_HISTORY] = history
    if catch:
        env["CATCH"] = "0"
    return hub.start([str(OOM), str(go)], **env)


def merged(records: list[dict]) -> dict[int, dict]:
    """seq -> the record, a later one's fields filling those an earlier one did not know."""
    out: dict[int, dict] = {}
    for r in records:
        out.setdefault(r["seq"], {}).update({k: v for k, v in r.items() if v is not None})
    return out


def test_an_oom_the_script_dies_of_sends_its_numbers_its_snapshot_and_its_message(tmp_path):
    hub = Hub(tmp_path)
    p = run_oom(tmp_path, hub, history="5000")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" in err
    wait_for(lambda: any(r["message"] for r in hub.ooms()), 30, what="the OOM's message")
    assert "history entries 2" in out  # the hold's segment_alloc and alloc, recorded from CUDA's start
    (rec,) = merged(hub.ooms()).values()
    assert rec["seq"] == 1 and rec["device"] == 0 and rec["uuid"] == "GPU-5a1c9e2b"
    assert (rec["alloc"], rec["total"], rec["free"]) == (2 * GiB, 80 * GiB, GiB)  # the hold took 256 MiB
    assert (rec["allocated"], rec["reserved"]) == (int(38.75 * GiB), int(38.75 * GiB) + 64 * MiB)
    assert rec["message"].startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 ")
    path = rec["snapshot"]
    assert os.path.dirname(path) == str(tmp_path / "memory") and os.path.basename(path).startswith("oom-")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, "rb") as f:
        snap = pickle.load(f)
    blocks = [b for s in snap["segments"] for b in s["blocks"]]
    assert sum(s["total_size"] for s in snap["segments"]) == rec["reserved"]
    assert any(fr["filename"] == str(OOM) for b in blocks for fr in b["frames"])  # who allocated the hold
    (oom,) = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    assert (oom["size"], oom["device_free"]) == (2 * GiB, GiB)


def test_torchs_own_readers_take_the_snapshot(tmp_path):
    viz = pytest.importorskip("torch.cuda._memory_viz", reason="torch's readers (pip install -e '.[demo]')")
    hub = Hub(tmp_path)
    p = run_oom(tmp_path, hub, history="5000")
    p.communicate(timeout=120)
    wait_for(lambda: any(r["snapshot"] for r in hub.ooms()), 30, what="the OOM's snapshot")
    with open(next(r["snapshot"] for r in hub.ooms() if r["snapshot"]), "rb") as f:
        snap = pickle.load(f)
    assert "total_reserved: 38.8GiB" in viz.segsum(snap)  # it checks every segment's bytes add up
    assert "2.0GiB requested, 1.0GiB free in CUDA" in viz.trace(snap)


def test_without_the_history_no_snapshot_is_written_and_nothing_recorded(tmp_path):
    hub = Hub(tmp_path)
    p = run_oom(tmp_path, hub, history=None)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 1 and "history entries 0" in out
    wait_for(lambda: any(r["message"] for r in hub.ooms()), 30, what="the OOM's message")
    (rec,) = merged(hub.ooms()).values()
    assert rec["alloc"] == 2 * GiB and "snapshot" not in rec and "snapshot_error" not in rec
    assert os.listdir(tmp_path / "memory") == []


def test_a_caught_oom_is_sent_and_the_rank_goes_on(tmp_path):
    hub = Hub(tmp_path)
    p = run_oom(tmp_path, hub, history=None, catch=True)
    try:
        wait_for(lambda: hub.ooms(), 60, what="the OOM record")
        at = max(hub.steps())
        wait_for(lambda: max(hub.steps()) >= at + 5, 60, what="steps after the OOM")
    finally:
        p.terminate()
        p.communicate(timeout=60)
    (rec,) = merged(hub.ooms()).values()
    assert rec["alloc"] == 2 * GiB and "message" not in rec  # caught: no exception reached the top


ARMED = """
import json, torch
from mpwatch.worker import cuda_memory
f = cuda_memory.armed()
print(json.dumps({"armed": f is not None, "cuda": bool(f and f.cuda), "history": f.history if f else None,
                  "queued": f is not None and any(c == f.on_cuda for c, _ in torch.cuda._queued_calls)}))
"""


@pytest.mark.torch
def test_a_real_import_torch_arms_the_forensics_for_cudas_start_and_the_history_only_when_asked(tmp_path):
    need("torch", "needs torch (pip install -e '.[demo]')")
    hub = Hub(tmp_path)

    def armed(**env: str) -> dict:
        res = subprocess.run([sys.executable, "-c", ARMED], env={**hub.env(), **env}, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    # queued for torch's CUDA initialisation, which this process (no GPU used) never reaches
    assert armed(**{protocol.ENV_CUDA_OOM: "1"}) == {"armed": True, "cuda": False, "history": 0, "queued": True}
    with_history = armed(**{protocol.ENV_CUDA_OOM: "1", protocol.ENV_CUDA_HISTORY: "20000"})
    assert with_history["history"] == 20000 and with_history["queued"]
    assert armed()["armed"] is False  # the run asked for nothing
    outside = {k: v for k, v in hub.env(**{protocol.ENV_CUDA_OOM: "1"}).items() if k != protocol.ENV_ADDRESS}
    res = subprocess.run([sys.executable, "-c", ARMED], env=outside, capture_output=True, text=True, timeout=300)
    assert json.loads(res.stdout)["armed"] is False  # outside mpwatch
