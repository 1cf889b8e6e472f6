"""Training overhead: demo/mnist.py's samples/s under mpwatch against the same command
without it, and the CPU mpwatch spends per second of training (target: under 1% either way).

Rows:
- throughput, one worker: `python demo/mnist.py` against `mpwatch --headless -n 1
  demo/mnist.py`, in alternated pairs; the ratio is the median of the pairs' ratios, with
  their spread (on a shared machine plain runs alone range by tens of percents);
- the CPU of the worker's sender thread and of the supervisor per second of training, in
  the same mpwatch runs (bench/cpuwatch.py, from /proc): what noise hardly moves;
- throughput, two workers (full run only, where torchrun exists): `torchrun --standalone
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
import statistics
import subprocess
import sys

from bench import measure
from bench.cpuwatch import CpuWatch
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


def _worker_pid(h: measure.Headless):
    return lambda: next((e["pid"] for e in h.events("worker_started") if e["rank"] == 0), None)


def run_mpwatch(d, steps: int, tag: str, n: int) -> dict:
    """{rate: samples/s (mean over ranks), cpu: CpuWatch.per_second over rank 0's training or None}."""
    h = measure.Headless(d, DEMO, *_demo_args(d, steps, tag), n=n, name=tag, env=_env())
    with h:
        watch = CpuWatch(h.proc.pid, _worker_pid(h), lambda: bool(h.events("report"))).start()
        try:
            rc = h.wait(timeout=600)
        finally:
            watch.stop()
        reports = [e["ts"] for e in h.events("report") if e["rank"] == 0]  # also collects pids for the cleanup
        if rc != 0:
            raise RuntimeError(f"mpwatch exited {rc}: {h.stderr_tail()}")
    rates = []
    for r in range(n):
        rates += _rates((h.run_dir / f"rank-{r}" / "stdout.log").read_text(errors="replace"))
    if len(rates) != n:
        raise RuntimeError(f"mpwatch run {tag}: {len(rates)} of {n} ranks printed samples/s")
    cpu = watch.per_second(reports[0], reports[-1]) if len(reports) >= 2 else None
    return {"rate": sum(rates) / n, "cpu": cpu}


def _spread(xs: list[float], fmt: str) -> str:
    """min-max, and the middle half when there are enough."""
    xs = sorted(xs)
    text = f"{min(xs):{fmt}}-{max(xs):{fmt}}"
    if len(xs) >= 4:
        q = statistics.quantiles(xs, n=4)
        text += f" (middle half {q[0]:{fmt}}-{q[2]:{fmt}})"
    return text


def _pairs(d, steps: int, reps: int, n: int):
    """(mpwatch results, plain rates), run in alternated pairs."""
    res: dict[str, list] = {"mpwatch": [], "alt": []}
    for i, who in measure.alternated(reps, ["mpwatch", "alt"]):
        if who == "mpwatch":
            res[who].append(run_mpwatch(d, steps, f"m{n}-{i}", n))
        else:
            res[who].append(run_plain(d, steps, f"p{n}-{i}", n=n))
    return res["mpwatch"], res["alt"]


def _throughput_row(what, n, steps, got, plain, alt_name, cmd_m, cmd_a):
    rates = [g["rate"] for g in got]
    ratios = [m / a for m, a in zip(rates, plain, strict=True)]
    ratio = statistics.median(ratios)
    return row(what, cmd_m, measure.median(rates), measure.median(plain), alt_name=alt_name, unit="samples/s",
               ratio=ratio, target=f"≥ {TARGET:g}x (under 1% slower)", ok=ratio >= TARGET,
               note=f"median of {len(ratios)} alternated pairs' ratios, {_spread(ratios, '.3f')}; samples/s: "
                    f"mpwatch {_spread(rates, '.0f')}, {alt_name} {_spread(plain, '.0f')}; {steps} steps a run; "
                    f"{os.cpu_count()} cores for {n} worker(s); the demo's own figure from its 3rd step on; "
                    f"vs `{cmd_a}`")


def _cpu_rows(got: list[dict], cmd_m: str) -> list[dict]:
    cpus = [g["cpu"] for g in got if g["cpu"] is not None]
    if not cpus:
        why = "no sender thread found (py-spy missing?)" if not any(g["cpu"] for g in got) else ""
        return [row("CPU per second of training, 1 worker", cmd_m, note=f"not measured: {why}")]
    out = []
    for part, what in (("sender", "Worker's sender thread CPU per second of training, 1 worker"),
                       ("supervisor", "Supervisor CPU per second of training, 1 worker")):
        share = [c[part] / c["worker"] for c in cpus]
        core = [100 * c[part] for c in cpus]
        med = statistics.median(share)
        out.append(row(what, cmd_m, round(statistics.median(core), 3), unit="% of a core",
                       target=f"< {1 - TARGET:.0%} of the worker's CPU", ok=med < 1 - TARGET,
                       note=f"{100 * med:.2f}% of the worker's own CPU (median of {len(cpus)} runs; "
                            f"{_spread([100 * x for x in share], '.2f')} %); % of a core {_spread(core, '.2f')}; "
                            f"CPU seconds from /proc (processes: stat utime+stime; the sender thread: schedstat) "
                            f"between rank 0's first and last report; "
                            f"the worker used {statistics.median(c['worker'] for c in cpus):.2f} cores"))
    return out


def run(quick: bool = False) -> list[dict]:
    reps, steps = (2, 60) if quick else (10, 300)
    rows = []
    with measure.scratch("training") as d:
        run_plain(d, 3, "warm-up")  # builds the stand-in data once, outside the measurement
        got, plain = _pairs(d, steps, reps, 1)
        cmd_m = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "1", "demo/mnist.py"])
        rows.append(_throughput_row("Training throughput, 1 worker (demo/mnist.py)", 1, steps, got, plain,
                                    "python demo/mnist.py", cmd_m, "python demo/mnist.py"))
        rows += _cpu_rows(got, cmd_m)
        if not quick and measure.TORCHRUN is not None:
            got, plain = _pairs(d, steps, reps, 2)
            cmd_m = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "2", "demo/mnist.py"])
            cmd_t = measure.shown([measure.TORCHRUN, "--standalone", "--nproc-per-node", "2", "demo/mnist.py"])
            rows.append(_throughput_row("Training throughput, 2 workers DDP (demo/mnist.py)", 2, steps, got, plain,
                                        "torchrun", cmd_m, cmd_t))
    return rows
