"""Issue 21 on a client nobody here wrote: pytorch/examples' mnist_hogwild, vendored unmodified
under tests/clients/mnist_hogwild (its README says from where). Its parent spawns trainer
processes that share one model, each with its own SGD; no line of mpwatch's anywhere. Under
`mpwatch --headless -n 1` each trainer is a child of rank 0, and its optimizer steps and the
losses it passes to backward() must come through as that child's reports, equal to the losses
the script prints itself.

The script reads MNIST from '../data' (relative to its cwd, the run's folder) and may not
download on CI: the test writes a tiny MNIST there first, in torchvision's raw layout and
idx format (torchvision checks only that the four raw files exist, no checksum), so it finds
them and never downloads."""
from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

import pytest

from tests.helpers import ROOT, need

need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
need("torchvision", "mnist_hogwild reads MNIST through torchvision (the demo extra)")
pytestmark = pytest.mark.torch

CLIENT = ROOT / "tests" / "clients" / "mnist_hogwild"
# The blobs of pytorch/examples' mnist_hogwild/{main,train}.py at the commit its README names.
UPSTREAM = {"main.py": "6fa449233d3a38c97fd1f3e87ac91132f6681131",
            "train.py": "49d171c451b740b0541bc1588b622780c9bd44f7"}
TRAIN_IMAGES, TEST_IMAGES, BATCH = 240, 48, 16
STEPS = TRAIN_IMAGES // BATCH  # one epoch of each trainer
# train.py's own line: pid, epoch, progress, then the loss it passed to backward() ({:.6f}). Read
# wherever it is, not line by line: both trainers write to rank 0's stdout, unbuffered (mpwatch's
# PYTHONUNBUFFERED: nothing lost at a crash), and print() writes its text and its newline apart, so
# one trainer's line may hold the other's whole (seen: a fresh-clone suite, one line short).
PRINTED = re.compile(r"(\d+)\tTrain Epoch: 1 \[\d+/\d+ \(\d+%\)\]\tLoss: (-?\d+\.\d{6})")


def git_blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def idx(type_code: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    """MNIST's idx format: two zero bytes, the type (0x08: unsigned byte), the number of
    dimensions, each dimension as a big-endian uint32, then the data."""
    return bytes([0, 0, type_code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + payload


def write_tiny_mnist(root: Path) -> None:
    """root/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte: the names torchvision checks."""
    import torch

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    for split, n in (("train", TRAIN_IMAGES), ("t10k", TEST_IMAGES)):
        labels = torch.randint(0, 10, (n,), generator=gen, dtype=torch.uint8)
        images = torch.randint(0, 64, (n, 28, 28), generator=gen, dtype=torch.uint8)
        for i, label in enumerate(labels.tolist()):  # a bright bar whose row is the digit: learnable
            images[i, 2 + 2 * label: 4 + 2 * label, 4:24] = 255
        (raw / f"{split}-images-idx3-ubyte").write_bytes(idx(0x08, (n, 28, 28), images.numpy().tobytes()))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(idx(0x08, (n,), labels.numpy().tobytes()))


def test_the_vendored_client_is_upstream_byte_for_byte():
    for name, blob in UPSTREAM.items():
        assert git_blob(CLIENT / name) == blob, f"{name} differs from pytorch/examples'"
    assert "mpwatch" not in (CLIENT / "main.py").read_text() + (CLIENT / "train.py").read_text()


def test_each_hogwild_trainer_shows_its_own_steps_and_the_losses_it_printed(headless, tmp_path):
    write_tiny_mnist(tmp_path / "data")  # '../data' from the run's folder, tmp_path/r0
    run = headless(CLIENT / "main.py", "--epochs", 1, "--num-processes", 2, "--batch-size", BATCH,
                   "--log-interval", 1, n=1)
    code = run.wait_exit(240)
    out = run.log(0)
    assert code == 0, run.stderr_text + out + run.log(0, "stderr")[-3000:]
    assert not list((tmp_path / "data" / "MNIST").glob("raw/*.gz")), "it downloaded"
    assert "Test set: Average loss" in out
    printed: dict[int, list[float]] = {}
    for pid, loss in PRINTED.findall(out):  # --log-interval 1: the n-th print of a pid is its step n
        printed.setdefault(int(pid), []).append(float(loss))
    assert len(printed) == 2 and all(len(losses) == STEPS for losses in printed.values()), printed
    reports = run.events("report")
    assert not [r for r in reports if "child_of" not in r], "the parent trains nothing: no steps of its own"
    by_trainer: dict[int, list[dict]] = {}
    for r in reports:
        by_trainer.setdefault(r["pid"], []).append(r)
    assert set(by_trainer) == set(printed), (set(by_trainer), set(printed))
    for pid, recs in by_trainer.items():
        assert all(r["child_of"] for r in recs), recs
        steps = [r["step"] for r in recs]
        assert steps == sorted(steps) and steps[-1] == STEPS, steps
        for r in recs:  # each report is one step's (step, loss): the loss that trainer printed there
            assert r["loss"] == pytest.approx(printed[pid][r["step"] - 1], abs=5e-7), (pid, r)
