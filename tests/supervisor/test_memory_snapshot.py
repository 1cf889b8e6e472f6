"""Issue 33: `mpwatch ctl memory RANK` (and `M` in the TUI): the rank writes torch's CUDA allocator
snapshot into rank-N/memory/ at its next step, an action of the one mechanism (contract.actions'
MEMORY, supervisor.live.actions, worker.memory_action). Real headless runs of
tests/fixtures/cuda_oom.py on the scripted torch (testing.torch_cuda: torch's own calls);
scripts/gpu-check's memory half does the same on a GPU."""
from __future__ import annotations

import json
import os
import pickle
import stat

import pytest

from mpwatch.rundir import layout
from mpwatch.sources.replay.source import ReplaySource
from tests.helpers import FIXTURES, mpwatch, one_line_error, wait_for

GiB, MiB = 1 << 30, 1 << 20
OOM = FIXTURES / "cuda_oom.py"


def env(tmp_path, **more: str) -> dict[str, str]:
    """Each rank's torch: 2 GiB allocated on an 80 GiB GPU; rank 0 allocates 256 MiB more itself
    (its CUDA starts), rank 1 nothing (it never initialises CUDA)."""
    cuda = tmp_path / "cuda.json"
    cuda.write_text(json.dumps({"ranks": {"*": [{"at": 0, "device": 0, "uuid": "GPU-aaaa", "allocated": 2 * GiB,
                                                 "reserved": 2 * GiB, "max_allocated": 2 * GiB}]}}))
    return dict(os.environ, MPWATCH_SCRIPTED_CUDA=str(cuda), HOLD_MB="256,0", **more)


def stepping(run, n: int = 2) -> None:
    wait_for(lambda: (lambda ws: len(ws) == n and all((w["step"] or 0) > 3 for w in ws))(run.status()["workers"]),
             60, what="the ranks stepping")


def test_ctl_memory_0_writes_its_snapshot_with_the_stacks_and_says_where(headless, tmp_path):
    run = headless(OOM, tmp_path / "go", n=2, opts=["--cuda-memory-history"], env=env(tmp_path))
    stepping(run)
    reply = run.ctl("memory", "0").stdout.strip()
    assert reply.startswith("CUDA memory snapshot asked of rank 0 at its next step")
    assert reply.endswith(f"it goes to rank-0/{layout.MEMORY}/")
    (ev,) = run.wait_event("memory_written", timeout=60)
    path = run.run_dir / ev["path"]
    assert ev["rank"] == 0 and ev["tool"] == "torch.cuda.memory" and ev["why"] is None  # the history is on
    assert path.parent == run.run_dir / "rank-0" / layout.MEMORY and path.suffix == ".pickle"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_size == ev["bytes"]
    with open(path, "rb") as f:
        snap = pickle.load(f)
    blocks = [b for s in snap["segments"] for b in s["blocks"]]
    assert sum(s["total_size"] for s in snap["segments"]) == 2 * GiB + 256 * MiB  # the scenario's and its own
    assert any(fr["filename"] == str(OOM) for b in blocks for fr in b["frames"])  # who allocated the 256 MiB
    started = run.events("memory_started")[0]  # asked of one rank: at its next step (`at` None)
    assert started["rank"] == 0 and started["step"] > 3 and started["at"] is None
    w = run.worker(0)
    assert w["memory"] == {"oom": None, "snapshot": str(path)} and "memory" not in run.worker(1)
    (req,) = run.status()["memory_snapshots"]
    assert [(r["rank"], r["state"], r["path"]) for r in req["results"]] == [(0, "written", ev["path"])]
    assert f"memory: snapshot {path}" in run.ctl("status").stdout
    assert "(pytorch.org/memory_viz opens it)" not in run.ctl("status").stdout  # said by the detail view
    viz = pytest.importorskip("torch.cuda._memory_viz", reason="torch's own reader")
    assert "total_reserved: 2.2GiB" in viz.segsum(snap)
    run.ctl("stop")
    run.wait_exit(60)
    summary = json.loads(mpwatch("summary", run.run_dir, "--json").stdout)
    assert [r["path"] for q in summary["memory_snapshots"] for r in q["results"]] == [ev["path"]]
    text = mpwatch("summary", run.run_dir).stdout  # issue 40: the docs say summary lists each request
    assert "CUDA memory snapshots:" in text and f"written on rank 0 ({ev['path']})" in text, text
    replay = ReplaySource(run.run_dir)  # the replay, at the end, rebuilt from the files
    replay.move("end")
    st = replay.status()
    assert next(w for w in st["workers"] if w["rank"] == 0)["memory"]["snapshot"] == str(path)
    assert [r["state"] for q in st["memory_snapshots"] for r in q["results"]] == ["written"]


def test_a_rank_without_cuda_or_without_torch_gets_a_clear_refusal(headless, tmp_path):
    run = headless(OOM, tmp_path / "go", n=2, env=env(tmp_path))
    stepping(run)
    run.ctl("memory", "1")
    (no_cuda,) = run.wait_event("memory_failed", timeout=60)
    assert no_cuda["rank"] == 1 and no_cuda["why"] == ("this process has not initialised CUDA: there is no CUDA "
                                                       "allocator to snapshot")
    assert not (run.run_dir / "rank-1" / layout.MEMORY).exists() or not os.listdir(
        run.run_dir / "rank-1" / layout.MEMORY)
    # issue 40: a refused request is listed too, with why, in ctl status and in summary
    why = "failed on rank 1 (this process has not initialised CUDA: there is no CUDA allocator to snapshot)"
    said = run.ctl("status").stdout
    assert "CUDA memory snapshot #1 of rank 1, at its next step, asked by ctl " in said and why in said, said
    run.ctl("stop")
    run.wait_exit(60)
    text = mpwatch("summary", run.run_dir).stdout
    assert "CUDA memory snapshots:" in text and why in text, text
    other = tmp_path / "plain"
    other.mkdir()
    plain = headless(FIXTURES / "reporter.py", "100000", n=1)  # a script that never imports torch
    stepping(plain, 1)
    plain.ctl("memory", "all")
    (no_torch,) = plain.wait_event("memory_failed", timeout=60)
    assert no_torch["why"] == "this process has not imported torch: there is no CUDA allocator to snapshot"
    bad = mpwatch("ctl", "--run", plain.run_dir, "memory", "7")
    one_line_error(bad, "no rank 7")
    assert mpwatch("ctl", "--run", plain.run_dir, "memory", "x").returncode == 2

