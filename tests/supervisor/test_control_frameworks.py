"""Issue 23's "checkpoint now" in the frameworks people bring: a Hugging Face `Trainer` and a
Lightning `Trainer` (tiny models from a config, CPU, DDP over gloo, no download) take it through
the callbacks of docs/control.md, run as written there (tests/manual.py reads them), at one
step on both ranks, and save exactly that step."""
import json
import os
import re

import pytest
import torch

from tests.helpers import FIXTURES, wait_for

pytestmark = pytest.mark.torch


def _ask(run) -> int:
    wait_for(lambda: all((w["step"] or 0) >= 3 and w["polls_checkpoint"] for w in run.status()["workers"]),
             timeout=300, what="both ranks training")
    said = run.ctl("checkpoint", "all").stdout
    m = re.match(r"checkpoint asked of ranks 0-1 at step (\d+)", said)
    assert m, said
    s = int(m.group(1))
    taken = run.wait_event("checkpoint_taken", timeout=180, count=2)
    # One step on both ranks: the one asked for, or (the request reached a rank past it: a
    # loaded machine) the next both take together, said to be late.
    [(at, late)] = {(e["step"], e["late"]) for e in taken}
    assert (at == s and not late) or (at > s and late), taken
    wait_for(lambda: f"SAVED {at}" in run.log(0), timeout=180, what="the framework's save")
    return at


def test_a_hugging_face_trainer_takes_checkpoint_now_through_the_documented_callback(headless, tmp_path):
    out = tmp_path / "hf"
    run = headless(FIXTURES / "hf_trainer.py", out, "0.3", n=2, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    s = _ask(run)
    saved = out / f"checkpoint-{s}"
    assert saved.is_dir() and (saved / "model.safetensors").is_file()
    assert json.loads((saved / "trainer_state.json").read_text())["global_step"] == s
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-")) == [f"checkpoint-{s}"]
    assert run.log(0).count("SAVED") == 1


def test_a_lightning_trainer_takes_checkpoint_now_through_the_documented_callback(headless, tmp_path):
    root = tmp_path / "pl"
    run = headless(FIXTURES / "lightning_trainer.py", root, "0.3", n=2)
    s = _ask(run)
    ckpt = root / f"mpwatch-step{s}.ckpt"
    wait_for(ckpt.is_file, timeout=60, what="the checkpoint file")
    assert torch.load(ckpt, weights_only=False)["global_step"] == s
    assert [p.name for p in root.glob("*.ckpt")] == [ckpt.name]
