"""Training throughput: demo/mnist.py's samples/s under mpwatch against the same command
without it (target: under 1% slower).

Rows, each from alternated runs (medians):
- one worker: `python demo/mnist.py` against `mpwatch --headless -n 1 demo/mnist.py`;
- two workers (full run only, where torchrun exists): `torchrun --standalone
  --nproc-per-node 2` against `mpwatch --headless -n 2`.

The figure is the demo's own last line, `samples/s: N`: training throughput from its third
step on, so start-up (torch's import, the process group, the data) is left out and only
what mpwatch adds to a running step counts: report(), phase() and the sender thread. Each
rank prints it; the runs' figure is the mean over ranks. A warm-up run first builds the
data (the offline stand-in) so no measured run pays for it.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from bench import measure
from bench.harness import ROOT, row

DEMO = ROOT / "demo" / "mnist.py"
TARGET = 0.99  # mpwatch's samples/s at least 99% of the plain command's
RATE = re.compile(r"^samples/s: ([0-9.]+)$", re.M)


def _rates(text: str) -> list[float]:
    return [float(x) for x in RATE.findall(text)]


def _env() -> dict:
    # Neither side may inherit a rank's environment (the bench may itself run under a launcher).
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {k: v for k, v in measure.clean_env().items() if k not in drop}


def _demo_args(d, steps: int, tag: str) -> list[str]:
    return ["--data-dir", str(d / "data"), "--no-download", "--max-steps", str(steps),
            "--checkpoint-dir", str(d / "ck" / tag), "--checkpoint-every", "0", "--log-every", "1000000"]


def run_plain(d, steps: int, tag: str, n: int = 1) -> float:
    if n == 1:
        cmd = [sys.executable, str(DEMO)]
    else:
        cmd = [measure.TORCHRUN, "--standalone", "--nproc-per-node", str(n), str(DEMO)]
    res = subprocess.run([*cmd, *_demo_args(d, steps, tag)], capture_output=True, text=True, cwd=d,
                         env=_env(), timeout=600)
    rates = _rates(res.stdout)
    if res.returncode != 0 or len(rates) != n:
        raise RuntimeError(f"{measure.shown(cmd)} exited {res.returncode}: "
                           f"{(res.stderr.strip().splitlines() or [''])[-1][:200]}")
    return sum(rates) / n


def run_mpwatch(d, steps: int, tag: str, n: int) -> float:
    h = measure.Headless(d, DEMO, *_demo_args(d, steps, tag), n=n, name=tag, env=_env())
    with h:
        rc = h.wait(timeout=600)
        h.events()  # collects the worker pids for the cleanup
        if rc != 0:
            raise RuntimeError(f"mpwatch exited {rc}: {h.stderr_tail()}")
    rates = []
    for r in range(n):
        rates += _rates((h.run_dir / f"rank-{r}" / "stdout.log").read_text(errors="replace"))
    if len(rates) != n:
        raise RuntimeError(f"mpwatch run {tag}: {len(rates)} of {n} ranks printed samples/s")
    return sum(rates) / n


def _row(what, n, steps, reps, res, alt_name, cmd_m, cmd_a):
    m, a = measure.median(res["mpwatch"]), measure.median(res["alt"])
    ratio = m / a if m and a else None
    spread = lambda xs: f"{min(xs):.0f}-{max(xs):.0f}"  # noqa: E731
    return row(what, cmd_m, m, a, alt_name=alt_name, unit="samples/s", target=f"≥ {TARGET:g}x (under 1% slower)",
               ok=None if ratio is None else ratio >= TARGET,
               note=f"median of {reps} alternated run(s) of {steps} steps each (mpwatch {spread(res['mpwatch'])}, "
                    f"{alt_name} {spread(res['alt'])}); {os.cpu_count()} cores for {n} worker(s); "
                    f"the demo's own figure from its 3rd step on; vs `{cmd_a}`")


def run(quick: bool = False) -> list[dict]:
    reps, steps = (2, 60) if quick else (5, 300)
    rows = []
    with measure.scratch("training") as d:
        run_plain(d, 3, "warm-up")  # builds the stand-in data once, outside the measurement
        res = {"mpwatch": [], "alt": []}
        for i, who in measure.alternated(reps, ["mpwatch", "alt"]):
            if who == "mpwatch":
                res[who].append(run_mpwatch(d, steps, f"m1-{i}", 1))
            else:
                res[who].append(run_plain(d, steps, f"p1-{i}"))
        cmd_m = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "1", "demo/mnist.py"])
        rows.append(_row("Training throughput, 1 worker (demo/mnist.py)", 1, steps, reps, res,
                         "python demo/mnist.py", cmd_m, "python demo/mnist.py"))
        if not quick and measure.TORCHRUN is not None:
            res = {"mpwatch": [], "alt": []}
            for i, who in measure.alternated(reps, ["mpwatch", "alt"]):
                if who == "mpwatch":
                    res[who].append(run_mpwatch(d, steps, f"m2-{i}", 2))
                else:
                    res[who].append(run_plain(d, steps, f"t2-{i}", n=2))
            cmd_m = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "2", "demo/mnist.py"])
            cmd_t = measure.shown([measure.TORCHRUN, "--standalone", "--nproc-per-node", "2", "demo/mnist.py"])
            rows.append(_row("Training throughput, 2 workers DDP (demo/mnist.py)", 2, steps, reps, res,
                             "torchrun", cmd_m, cmd_t))
    return rows
