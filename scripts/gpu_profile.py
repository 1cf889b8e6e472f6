"""scripts/gpu-check's profile check (issue 32): `ctl profile 0` on a CUDA training loop with no line
of mpwatch's records the GPU too: the trace holds the loop's CUDA kernels beside its aten operators,
and the operators' table has their self time on the GPU.

    scripts/gpu_profile.py [--timeout SECONDS]     the check
    scripts/gpu_profile.py --worker N              the loop, as mpwatch's worker (N steps)

Runs `mpwatch --headless -n 1 scripts/gpu_profile.py --worker N`, asks `ctl profile 0 --steps 5` once
it steps, and passes when the trace (gunzipped, parsed) has events of category `kernel` and `aten::`
operators, the profile_written event's top operators have a self time on the GPU above zero, and the
loop ran to its end (exit 0). Exit 0 pass, 1 fail, 2 this machine cannot run it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(steps: int) -> int:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x, y = torch.randn(256, 512, device=dev), torch.randint(0, 10, (256,), device=dev)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        time.sleep(0.01)
    torch.cuda.synchronize()
    return 0


def say(msg: str) -> None:
    print(f"gpu_profile: {msg}", flush=True)


def events(run_dir: Path, kind: str) -> list[dict]:
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [e for e in map(json.loads, lines) if e.get("event") == kind]


def wait(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"no {what} within {timeout:g} s")


def check(timeout: float) -> int:
    try:
        import torch
    except ImportError:
        say("torch is not installed: cannot run")
        return 2
    if not torch.cuda.is_available():
        say("no CUDA device torch can use: cannot run")
        return 2
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    mp = [sys.executable, "-m", "mpwatch"]
    with tempfile.TemporaryDirectory(prefix="gpu-profile-") as tmp:
        run_dir = Path(tmp) / "run"
        proc = subprocess.Popen([*mp, "--headless", "-n", "1", "--run-dir", str(run_dir), __file__, "--worker", "2000"],
                                env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            wait(lambda: [e for e in events(run_dir, "report") if (e.get("step") or 0) >= 20], timeout, "steps")
            subprocess.run([*mp, "ctl", "--run", str(run_dir), "profile", "0", "--steps", "5"], env=env, check=True)
            written = wait(lambda: events(run_dir, "profile_written") or events(run_dir, "profile_failed"),
                           timeout, "profile's outcome")[0]
            if written["event"] != "profile_written":
                say(f"FAIL: no trace: {written.get('why')}")
                return 1
            with gzip.open(run_dir / written["path"], "rt") as f:
                trace = json.load(f)
            kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
            aten = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("aten::")]
            gpu_top = [t for t in written["top"] if (t[2] or 0) > 0]
            say(f"trace {written['path']}: {len(kernels)} kernels, {len(aten)} aten operators; "
                f"top by GPU self time: {[t[0] for t in gpu_top[:3]]}; the loop waited {written['held_ms']} ms")
            rc = proc.wait(timeout=timeout)
            ok = bool(kernels and aten and gpu_top) and rc == 0
            say("PASS" if ok else f"FAIL (kernels {len(kernels)}, aten {len(aten)}, GPU times {len(gpu_top)}, exit {rc})")
            return 0 if ok else 1
        except (TimeoutError, subprocess.CalledProcessError) as exc:
            say(f"FAIL: {exc}")
            return 1
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)


def main() -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu_profile.py")
    p.add_argument("--worker", type=int, metavar="N")
    p.add_argument("--timeout", type=float, default=240.0)
    ns = p.parse_args()
    return worker(ns.worker) if ns.worker is not None else check(ns.timeout)


if __name__ == "__main__":
    sys.exit(main())
