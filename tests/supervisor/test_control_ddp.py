"""Issue 23's proof with real DDP ranks (gloo, CPU): "checkpoint now" is taken at the same step
on every rank, and a learning rate changed with `ctl set` takes effect at the same step on every
rank, so their parameters stay equal step by step (a DDP run whose ranks disagree on a learning
rate silently diverges: the digests would differ from that step on)."""
import re

import pytest

from tests.helpers import FIXTURES, need, wait_for

need("torch", "DDP ranks need torch (the demo extra)")
pytestmark = pytest.mark.torch


def _lines(run, rank: int, kind: str) -> list[list[str]]:
    return [ln.split()[1:] for ln in run.log(rank).splitlines() if ln.startswith(kind + " ")]


def test_checkpoint_and_lr_change_at_one_step_on_every_ddp_rank(headless, tmp_path):
    ckpts = tmp_path / "ckpt"
    ckpts.mkdir()
    n = 3
    run = headless(FIXTURES / "ddp_control.py", "0.05", ckpts, n=n)
    wait_for(lambda: all((w["step"] or 0) >= 10 and w["polls_checkpoint"] for w in run.status()["workers"]),
             timeout=180, what="every rank training")
    said = run.ctl("checkpoint", "all").stdout
    s = int(re.match(r"checkpoint asked of ranks 0-2 at step (\d+)", said).group(1))
    taken = run.wait_event("checkpoint_taken", timeout=120, count=n)
    assert {(e["step"], e["late"]) for e in taken} == {(s, False)}, taken
    said = run.ctl("set", "lr", "0.02").stdout
    at = int(re.match(r"lr = 0.02 from step (\d+) on ranks 0-2", said).group(1))
    applied = run.wait_event("tunable_applied", timeout=120, count=n)
    assert {(e["step"], e["late"]) for e in applied} == {(at, False)}, applied
    wait_for(lambda: all(len(_lines(run, r, "D")) > at + 5 for r in range(n)), timeout=120,
             what="steps past the change")

    saved = [_lines(run, r, "CHECKPOINT") for r in range(n)]
    assert all(c == saved[0] for c in saved) and saved[0][0][0] == str(s), saved  # one step, one state
    files = sorted(p.name for p in ckpts.iterdir())
    assert files == [f"rank{r}-step{s}.pt" for r in range(n)]
    import torch  # here, not at collection: every lane collects this module

    states = [torch.load(ckpts / f) for f in files]
    assert all(torch.equal(states[0][k], st[k]) for st in states for k in states[0])

    steps = [_lines(run, r, "D") for r in range(n)]
    common = min(len(x) for x in steps)
    for i in range(common):  # every rank: the same lr and the same parameters at every step
        assert len({tuple(steps[r][i]) for r in range(n)}) == 1, [steps[r][i] for r in range(n)]
    lrs = [(int(st), float(lr)) for st, lr, _ in steps[0][:common]]
    # "from step S" is the script's step S: the first one trained with 0.02 (issue 31: it was S+1)
    assert {lr for st, lr in lrs if st < at} == {0.1} and {lr for st, lr in lrs if st >= at} == {0.02}
