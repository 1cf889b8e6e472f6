"""scripts/gpu-check's automatic-steps check (issue 21): on a CUDA training loop with no line of
mpwatch's, the hooks add no synchronisation, and the losses mpwatch shows are the loop's own.

    scripts/gpu_auto.py [--steps N] [--timeout SECONDS]     the check
    scripts/gpu_auto.py --worker N                          the loop, as mpwatch's worker

The check runs `mpwatch --headless -n 1 scripts/gpu_auto.py --worker N`. The worker builds a
small model on cuda:0, warms up, then trains N steps (batches made on the GPU, cross-entropy,
backward(), an SGD step) under `torch.cuda.set_sync_debug_mode("error")`: any synchronising
call on its thread raises, so a hook that waited for the GPU (an .item(), a blocking copy)
fails the worker. Then, outside the debug mode, it prints its own losses. Passes when the worker
exits 0, mpwatch counted N automatic steps (steps_from "auto"), and every loss in the run's
report events equals the loop's own loss at that step (float32 through the pinned ring: exact).
Exit 0 pass, 1 fail, 2 this machine cannot run it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "GPU_AUTO_LOSSES "


def worker(steps: int) -> int:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    kept = []

    def step():
        x = torch.randn(128, 256, device=dev)
        y = torch.randint(0, 10, (128,), device=dev)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    for _ in range(3):  # kernels loaded, the optimizer's state made: outside the debug mode
        kept.append(step())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            kept.append(step())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    print(MARK + json.dumps([float(t) for t in kept]), flush=True)
    return 0


def say(msg: str) -> None:
    print(f"gpu-check (automatic steps): {msg}", flush=True)


def check(steps: int, timeout: float) -> int:
    try:
        import torch
    except ImportError:
        say("cannot run here: no torch")
        return 2
    if torch.version.cuda is None or not torch.cuda.is_available():
        say("cannot run here: no CUDA device for torch")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="mpwatch-gpu-auto-"))
    run_dir = tmp / "run"
    cmd = [sys.executable, "-m", "mpwatch", "--headless", "-n", "1", "--run-dir", str(run_dir),
           str(Path(__file__).resolve()), "--worker", str(steps)]
    say("starting: " + " ".join(cmd))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    env.pop("MPWATCH_AUTO", None)
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=timeout)
    except subprocess.TimeoutExpired:
        say(f"FAILED: the run took over {timeout:g} s ({run_dir})")
        return 1
    failures = []
    out = (run_dir / "rank-0" / "stdout.log").read_text(errors="replace")
    err = (run_dir / "rank-0" / "stderr.log").read_text(errors="replace")
    own = next((json.loads(line[len(MARK):]) for line in out.splitlines() if line.startswith(MARK)), None)
    if res.returncode != 0 or own is None:
        failures.append(f"the worker failed (mpwatch exit {res.returncode}): {err.strip()[-1500:]}")
    final = json.loads((run_dir / "final.json").read_text()) if (run_dir / "final.json").exists() else {}
    w = (final.get("workers") or [{}])[0]
    reports = []
    for line in (run_dir / "events.jsonl").read_text().splitlines() if (run_dir / "events.jsonl").exists() else []:
        rec = json.loads(line)
        if rec.get("event") == "report" and rec.get("rank") == 0 and "child_of" not in rec:
            reports.append(rec)
    if own is not None:
        if w.get("step") != steps + 3 or w.get("steps_from") != "auto":
            failures.append(f"mpwatch shows step {w.get('step')} from {w.get('steps_from')}, not {steps + 3} auto")
        with_loss = [r for r in reports if r.get("loss") is not None]
        wrong = [(r["step"], r["loss"], own[r["step"] - 1]) for r in with_loss if r["loss"] != own[r["step"] - 1]]
        if not with_loss or wrong:
            failures.append(f"losses: {len(with_loss)} report events with a loss; differing (step, shown, own): "
                            f"{wrong[:5]}")
        say(f"{len(reports)} report events, {len(with_loss)} with a loss, last step {w.get('step')} "
            f"({w.get('steps_from')}), last loss {w.get('loss')} (own {own[-1]:.6g})")
    if failures:
        say("FAILED:\n  - " + "\n  - ".join(failures) + f"\n  run directory kept: {run_dir}")
        return 1
    say(f"OK: {steps} CUDA steps under set_sync_debug_mode('error') with the hooks on; mpwatch counted them and "
        f"read the loop's own losses ({run_dir})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu_auto.py")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--timeout", type=float, default=240.0)
    ns = p.parse_args()
    if ns.worker is not None:
        return worker(ns.worker)
    return check(ns.steps, ns.timeout)


if __name__ == "__main__":
    sys.exit(main())
