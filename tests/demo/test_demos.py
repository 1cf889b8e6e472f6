"""The demos as real training runs at tiny size, each under `mpwatch --headless` on the CPU.

Proof comes from what the run leaves behind: events.jsonl (reports, starts, resizes),
final.json, and each rank's own stdout. One shared data folder holds the generated stand-in
(made once, offline, by the demos' own loader); the IDX loader is tested on files the test
writes byte by byte in MNIST's format. Torch takes seconds to import on the CI box: worker
counts stay at 2-3 and steps at tens.
"""
from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from mpwatch.sources.local import Client
from tests.helpers import ROOT, need, wait_for

need("torch", "the demos need torch (pip install -e '.[demo]')")

# One lane for the module: its data folder is made once, and its mnist run (the `mnist` fixture,
# which two tests read) is trained once.
pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("demos")]
DEMO = ROOT / "demo"


@pytest.fixture(scope="module")
def torch():
    """torch, imported by the tests that use it here, not at collection (which every lane does)."""
    import torch
    return torch


@pytest.fixture(scope="module")
def mnist_data():
    """The demos' loader (demo/mnist_data.py), which imports torch."""
    sys.path.insert(0, str(ROOT / "demo"))
    import mnist_data
    return mnist_data


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, mnist_data, torch):
    """The offline stand-in, made once by the loader (the mirror name never resolves)."""
    folder = tmp_path_factory.mktemp("data")
    said = []
    old = mnist_data.MIRROR_HOST
    mnist_data.MIRROR_HOST = "mnist.invalid"  # RFC 2606: fails to resolve, like being offline
    try:
        data = mnist_data.load(folder, download_ok=True, say=said.append)
    finally:
        mnist_data.MIRROR_HOST = old
    assert data.source == "stand-in"
    assert len(said) == 1 and "offline" in said[0] and "generated digits" in said[0], said
    assert data.train.images.shape == (60000, 28, 28) and data.train.images.dtype == torch.uint8
    assert sorted(data.train.labels.unique().tolist()) == list(range(10))
    return folder


def log(run, rank: int, stream: str = "stdout") -> str:
    return (run.run_dir / f"rank-{rank}" / f"{stream}.log").read_text(errors="replace")


def explain(run, ranks) -> str:
    return run.stderr_text + "".join(f"\n--- rank {r} ---\n{log(run, r)}{log(run, r, 'stderr')[-2000:]}"
                                     for r in ranks)


def reports_by_rank(run) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for rec in run.events("report"):
        out.setdefault(rec["rank"], []).append(rec)
    return out


# ------------------------------------------------------------------ IDX ----
def _idx_bytes(code: int, array: np.ndarray) -> bytes:
    """MNIST's format, written by hand: 0, 0, type code, ndim; big-endian dims; data."""
    return bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def test_idx_loader_reads_mnist_files_written_by_hand(tmp_path, mnist_data, torch):
    rng = np.random.default_rng(0)
    raw = tmp_path / "MNIST" / "raw"  # torchvision's layout
    raw.mkdir(parents=True)
    want = {}
    for split, n in (("train", 12), ("t10k", 5)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        want[split] = images, labels
        (raw / f"{split}-images-idx3-ubyte").write_bytes(_idx_bytes(0x08, images))
        # One file gzipped, as the mirrors serve them.
        with gzip.open(raw / f"{split}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(_idx_bytes(0x08, labels))
    said = []
    data = mnist_data.load(tmp_path, download_ok=False, say=said.append)
    assert said == [] and data.source == "mnist"
    assert data.train.images.shape == (12, 28, 28) and data.test.images.shape == (5, 28, 28)
    assert np.array_equal(data.train.images.numpy(), want["train"][0])
    assert np.array_equal(data.test.labels.numpy(), want["t10k"][1].astype(np.int64))
    assert data.train.labels.dtype == torch.int64
    x = data.normalised(data.train)
    assert x.shape == (12, 1, 28, 28) and x.dtype == torch.float32


def test_idx_round_trip_and_bad_files(tmp_path, mnist_data):
    arr = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    mnist_data.write_idx(tmp_path / "a.idx.gz", arr)
    back = mnist_data.read_idx(tmp_path / "a.idx.gz")
    assert back.dtype == np.int32 and np.array_equal(back, arr)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x05abcde")
    with pytest.raises(mnist_data.IdxError, match="magic"):
        mnist_data.read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(_idx_bytes(0x08, np.zeros((3, 2), np.uint8))[:-1])
    with pytest.raises(mnist_data.IdxError, match="promises"):
        mnist_data.read_idx(tmp_path / "short")


def test_stand_in_is_deterministic_and_not_noise(mnist_data, torch):
    a, b = mnist_data.stand_in(200, 50, seed=3), mnist_data.stand_in(200, 50, seed=3)
    assert torch.equal(a.train.images, b.train.images) and torch.equal(a.test.labels, b.test.labels)
    # Digits: the mean image of each class differs from the others' far more than noise would.
    imgs = a.train.images.float()
    means = torch.stack([imgs[a.train.labels == d].mean(0) for d in range(10)])
    spread = torch.cdist(means.flatten(1), means.flatten(1))
    assert spread[~torch.eye(10, dtype=torch.bool)].min() > 100


# ------------------------------------------------------------------ mnist ----
class MnistRun:
    """demo/mnist.py trained once for this module's mnist tests: 2 ranks from scratch, paused
    past step 30 and resized to 3, which resume from the checkpoint and finish at step 100."""

    def __init__(self, run, ck, said: str, code: int):
        self.run = run
        self.ck = ck  # the checkpoint folder
        self.said = said  # what `ctl resize 3` printed
        self.code = code  # the supervisor's exit code
        self.events = run.events()
        # the first attempt: the two ranks' own events until they were paused for the resize
        paused = next(i for i, e in enumerate(self.events) if e["event"] == "paused")
        self.before_resize = self.events[:paused]


@pytest.fixture(scope="module")
def mnist(headless_module, data_dir, tmp_path_factory):
    ck = tmp_path_factory.mktemp("ck")
    run = headless_module(DEMO / "mnist.py", "--data-dir", data_dir, "--no-download", "--max-steps", 100,
                          "--checkpoint-dir", ck, "--checkpoint-every", 10, "--log-every", 10,
                          n=2, opts=["--grace", "60"])
    # Pause first so the resize lands mid-training however fast the box is; resize wakes them. Both
    # ranks step 30-50 times a second on a quiet box: the step is read from the live status and the
    # pause sent over one open connection (events.jsonl lags up to a second, a `ctl` start another).
    with Client.at(run.run_dir) as client:
        wait_for(lambda: any(w["rank"] == 0 and (w["step"] or 0) >= 30 for w in client.status()["workers"]),
                 150, interval=0.02, what="rank 0 past step 30")
        client.act("pause", "all")
    run.wait_event("paused", count=2)
    said = run.ctl("resize", "3").stdout
    return MnistRun(run, ck, said, run.wait_exit(timeout=240))


@pytest.mark.timeout(600)  # the module's mnist run, when it starts here
def test_mnist_trains_under_mpwatch_and_the_loss_falls(mnist):
    run = mnist.run
    assert mnist.code == 0, explain(run, (0, 1, 2))
    reports = reports_by_rank(run)
    assert set(reports) == {0, 1, 2}, explain(run, (0, 1, 2))
    losses = [r["loss"] for rank in (0, 1) for r in reports[rank]]
    k = max(1, len(losses) // 6)
    first = [r["loss"] for rank in (0, 1) for r in reports[rank][:k]]
    last = [r["loss"] for rank in (0, 1) for r in reports[rank][-k:]]
    assert sum(last) / len(last) < sum(first) / len(first), losses
    for rank in (0, 1):
        # The script's reports win over mpwatch.worker.auto's steps from its first report on. Its first
        # optimizer step comes just before that report: a loaded machine may flush it alone.
        started = [r for r in mnist.before_resize if r["event"] == "report" and r["rank"] == rank]
        own = list(itertools.dropwhile(lambda r: "samples_per_s" not in r["metrics"], started))
        assert own and len(started) - len(own) <= 3, started[:5]
        assert all(r["metrics"].get("samples_per_s") is not None for r in own), own
    assert max(r["step"] for r in reports[0]) == 100
    first_starts = [e for e in mnist.before_resize if e["event"] == "worker_started"]
    assert sorted(e["rank"] for e in first_starts) == [0, 1]
    assert {e["world_size"] for e in first_starts} == {2}
    final = json.loads((run.run_dir / "final.json").read_text())
    for w in final["workers"]:
        assert {"data", "compute", "sync", "optimizer"} <= set(w["phases"]), w["phases"]
    out0, out1 = log(run, 0), log(run, 1)
    assert "rank 0: WORLD_SIZE 2, cpu, backend gloo" in out0 and "rank 1: WORLD_SIZE 2" in out1
    assert "finished (max steps (100) reached) at step 100" in out0
    assert re.search(r"^samples/s: \d+\.\d$", out0, re.M), out0


@pytest.mark.timeout(600)  # the module's mnist run, when it starts here
def test_mnist_resize_2_to_3_resumes_from_the_checkpoint(mnist):
    run, ck = mnist.run, mnist.ck
    assert "resizing from 2 to 3" in mnist.said
    assert mnist.code == 0, explain(run, (0, 1, 2))

    stop = re.search(r"rank 0: checkpoint at step (\d+) \(stopped by SIGTERM\)", log(run, 0))
    assert stop, explain(run, (0, 1, 2))
    saved = int(stop.group(1))
    assert 30 <= saved < 100
    for rank in (0, 1, 2):
        out = log(run, rank)
        assert (f"rank {rank}: resumed from {ck / 'latest.pt'} at step {saved} (epoch 0, saved with "
                f"WORLD_SIZE 2); now WORLD_SIZE 3") in out, out
        assert f"rank {rank}: max steps (100) reached at step 100" in out, out
    assert "training: 312 steps per epoch of 192 samples (3 x 64)" in log(run, 0)

    events = mnist.events
    [resized] = [e for e in events if e["event"] == "resized"]
    assert (resized["frm"], resized["to"], resized["mode"]) == (2, 3, "restart")
    after = events[events.index(resized) - 3:]  # the three starts come just before "resized"
    starts = [e for e in after if e["event"] == "worker_started"]
    assert sorted(e["rank"] for e in starts) == [0, 1, 2] and {e["world_size"] for e in starts} == {3}
    later = [e for e in after if e["event"] == "report"]
    assert {e["rank"] for e in later} == {0, 1, 2}
    # Resumed, not restarted: steps go on from the checkpoint, and the model is the trained one.
    assert min(e["step"] for e in later) > saved
    first = min(later, key=lambda e: e["ts"])
    assert first["loss"] < 2.0, first  # chance is ln 10 = 2.30: the weights came back too


@pytest.mark.timeout(600)  # the module's mnist run, when it starts here
def test_mnist_runs_as_a_plain_script_and_resumes(mnist, data_dir, tmp_path):
    """Without mpwatch (none of its variables), from a copy of the checkpoint the module's run left
    at step 100 with 3 ranks: the plain script resumes it alone, to step 104."""
    shutil.copy(mnist.ck / "latest.pt", tmp_path / "latest.pt")
    plain = subprocess.run([sys.executable, str(DEMO / "mnist.py"), "--data-dir", str(data_dir), "--no-download",
                            "--max-steps", "104", "--checkpoint-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={k: v for k, v in os.environ.items()
                                if not k.startswith(("MPWATCH_", "RANK", "WORLD_SIZE", "LOCAL_"))})
    assert plain.returncode == 0, plain.stderr
    assert "rank 0: WORLD_SIZE 1, cpu, backend none" in plain.stdout
    assert (f"rank 0: resumed from {tmp_path / 'latest.pt'} at step 100 (epoch 0, saved with WORLD_SIZE 3); "
            "now WORLD_SIZE 1") in plain.stdout, plain.stdout
    assert plain.stdout.rstrip().splitlines()[-1].startswith("samples/s: ")
    assert "max steps (104) reached at step 104" in plain.stdout


# ------------------------------------------------------------------ the seed patterns ----
def test_hogwild_children_report_over_their_own_channels(headless, data_dir):
    run = headless(DEMO / "hogwild.py", "--data-dir", data_dir, "--no-download", "--procs", 2,
                   "--max-steps", 250, n=1)
    with Client.at(run.run_dir) as client:
        def trainers_reporting():
            if run.proc.poll() is not None:
                raise AssertionError("the run ended before its trainers were seen reporting:\n"
                                     + explain(run, (0,)))
            ws = client.status()["workers"]
            if not ws:  # the supervisor answers before it has started its worker
                return None
            [w] = ws
            kids = [c for c in w["children"] if c["reporting"] and c["step"] is not None]
            return kids if len(kids) == 2 else None
        kids = wait_for(trainers_reporting, timeout=120, interval=0.05, what="both trainers reporting")
    assert all(c["loss"] is not None for c in kids)
    assert run.wait_exit(timeout=180) == 0, explain(run, (0,))
    parent = [r for r in reports_by_rank(run)[0] if "child_of" not in r]
    assert parent[-1]["step"] == 500 and parent[-1]["loss"] < parent[0]["loss"]
    # The trainers never call report(): their optimizer steps are their steps, each to the last
    # (a multiprocessing child's last reports are flushed as it exits).
    trainers: dict[int, list[dict]] = {}
    for r in reports_by_rank(run)[0]:
        if "child_of" in r:
            trainers.setdefault(r["pid"], []).append(r)
    assert len(trainers) == 2 and all(t[-1]["step"] == 250 and t[-1]["loss"] is not None for t in trainers.values())
    out = log(run, 0)
    assert out.count("steps, last loss") == 2 and "hogwild: 500 steps in all" in out


def test_independent_ranks_and_trainers_report_results(headless, data_dir):
    run = headless(DEMO / "independent.py", "--data-dir", data_dir, "--no-download", "--procs", 2,
                   "--max-steps", 30, n=2)
    assert run.wait_exit(timeout=240) == 0, explain(run, (0, 1))
    reports = reports_by_rank(run)
    assert set(reports) == {0, 1}
    for rank in (0, 1):
        assert reports[rank][-1]["step"] == 60  # the shared counter: 2 trainers x 30 steps
        out = log(run, rank)
        shards = re.findall(r"shard +(\d+) pid +\d+: 30 steps", out)
        assert sorted(map(int, shards)) == [2 * rank, 2 * rank + 1], out
        assert f"rank {rank}: 60 steps in all" in out and "samples/s: " in out
    # Each trainer's steps are automatic; its own report() of a metric merges into them.
    trainers = [r for rs in reports.values() for r in rs if "child_of" in r]
    last: dict[int, dict] = {}
    for r in trainers:
        last[r["pid"]] = r
    assert len(last) == 4 and all(r["step"] == 30 and r["loss"] is not None for r in last.values())
    assert all("samples_per_s" in r["metrics"] for r in last.values())


def test_contention_on_cpu_says_there_is_nothing_to_show(headless, torch):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: scripts/gpu-check runs the real contention demo")
    run = headless(DEMO / "contention.py", "--steps", 3, n=2)
    assert run.wait_exit(timeout=120) == 0, explain(run, (0, 1))
    for rank in (0, 1):
        assert f"contention: rank {rank}: no CUDA GPU here, nothing to show" in log(run, rank)
