"""Issue 23's "checkpoint now" in the frameworks people bring: a Hugging Face `Trainer` and a
Lightning `Trainer` (tiny models from a config, CPU, DDP over gloo, no download) take it through
the callbacks of docs/control.md, run as written there (tests/manual.py reads them), at one
step on both ranks, and save exactly that step. The runs are those of tests/auto/test_frameworks.py
(tests/framework_runs.py): the callback is armed once their planted hang is released."""
import json

import pytest

from tests.framework_runs import CheckpointAct
from tests.helpers import need

need("torch", "the frameworks' runs need torch (the demo extra)")

pytestmark = [pytest.mark.torch, pytest.mark.timeout(600)]  # the shared run, when it starts here


def one_step_on_both_ranks(act: CheckpointAct) -> int:
    # One step on both ranks: the one asked for, or (the request reached a rank past it: a
    # loaded machine) the next both take together, said to be late.
    [(at, late)] = {(e["step"], e["late"]) for e in act.taken}
    assert (at == act.asked and not late) or (at > act.asked and late), act.taken
    return at


def test_a_hugging_face_trainer_takes_checkpoint_now_through_the_documented_callback(hf_run):
    hf_run.act(hf_run.checkpoint)
    s = one_step_on_both_ranks(hf_run.checkpoint)
    out = hf_run.folder / "hf"
    saved = out / f"checkpoint-{s}"
    assert saved.is_dir() and (saved / "model.safetensors").is_file()
    assert json.loads((saved / "trainer_state.json").read_text())["global_step"] == s
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-")) == [f"checkpoint-{s}"]
    assert hf_run.checkpoint.log0.count("SAVED") == 1


def test_a_lightning_trainer_takes_checkpoint_now_through_the_documented_callback(lightning_run):
    lightning_run.act(lightning_run.checkpoint)
    s = one_step_on_both_ranks(lightning_run.checkpoint)
    root = lightning_run.folder / "pl"
    ckpt = root / f"mpwatch-step{s}.ckpt"
    assert ckpt.is_file()
    import torch  # here, not at collection: every lane collects this module

    assert torch.load(ckpt, weights_only=False)["global_step"] == s
    assert [p.name for p in root.glob("*.ckpt")] == [ckpt.name]
    assert lightning_run.checkpoint.log0.count("SAVED") == 1
