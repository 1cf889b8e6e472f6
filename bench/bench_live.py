"""Issue 23's costs: should_checkpoint() and tunable() per call in a real worker of a real run,
with nothing due (what every step pays), against the same calls outside mpwatch; and a Prometheus
scrape of a run of 256 ranks on 8 (scripted) GPUs, over HTTP as Prometheus does it, with what the
supervisor spends on it, and its CPU while nobody scrapes (the port open) against a run without
the flag.
"""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request

import psutil

from bench import measure
from bench.harness import row

MARK = "MPWATCH_BENCH_LIVE "
CALL_TARGET_US = 0.5
SCRAPE_TARGET_MS = 20.0

TIMER = r'''
import json, os, sys, time
n, reps = int(sys.argv[1]), int(sys.argv[2])
import mpwatch
sc, tu = mpwatch.should_checkpoint, mpwatch.tunable
mpwatch.report(step=1)
sc(); tu("lr", 0.1)  # declared, polling: the steady state of a training loop
time.sleep(0.3)
cpu = time.process_time_ns

def loop(f, *args):
    c = cpu()
    for _ in range(n):
        f(*args)
    return cpu() - c

def empty():
    c = cpu()
    for _ in range(n):
        pass
    return cpu() - c

out = {"active": mpwatch.active()}
for name, f, args in (("should_checkpoint", sc, ()), ("tunable", tu, ("lr", 0.1))):
    per = sorted(max(0, loop(f, *args) - empty()) / n / 1000.0 for _ in range(reps))
    out[name] = per[len(per) // 2]
print(os.environ.get("MARK", "") + json.dumps(out), flush=True)
'''

SLEEPER = r'''
import sys, time, mpwatch
step = 0
while True:
    mpwatch.report(step=step, loss=1.0 / (step + 1))
    step += 1
    time.sleep(float(sys.argv[1]))
'''


def _parse(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"the timing script printed no result: {text[-300:]!r}")


def calls(n: int, reps: int) -> tuple[dict, dict, str]:
    """Per-call µs of CPU under mpwatch and outside it."""
    with measure.scratch("live-calls") as d:
        script = measure.write_script(d, "live_timer.py", TIMER)
        res = subprocess.run([measure.sys.executable, str(script), str(n), str(reps)], capture_output=True,
                             text=True, timeout=300, env=measure.clean_env(MARK=MARK))
        outside = _parse(res.stdout)
        with measure.Headless(d, script, n, reps, n=1, env=measure.clean_env(MARK=MARK)) as h:
            if h.wait(timeout=300) != 0:
                raise RuntimeError(f"mpwatch exited: {h.stderr_tail()}")
            under = _parse((h.run_dir / "rank-0" / "stdout.log").read_text(errors="replace"))
    if not under["active"] or outside["active"]:
        raise RuntimeError("the timings ran on the wrong side of mpwatch")
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "1", "live_timer.py", str(n), str(reps)])
    return under, outside, cmd


def _gpus(d, n_gpus: int, ranks: int) -> str:
    per = max(1, ranks // n_gpus)
    path = d / "nvml.json"
    path.write_text(json.dumps({
        "gpus": [{"name": "Fake 80G", "mem_total": 80 << 30, "uuid": f"GPU-bench-{i}"} for i in range(n_gpus)],
        "frames": [{"gpus": [{"util_gpu": 70, "processes": [{"pid": f"rank:{r}", "mem": 1 << 30}
                                                            for r in range(i * per, min(ranks, (i + 1) * per))]}
                             for i in range(n_gpus)]}]}))
    return str(path)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def scrape(ranks: int, n_scrapes: int, window: float) -> dict:
    """A real run of `ranks` workers (a report a second each) with --metrics-port: its idle
    CPU over `window` s unscraped, then n_scrapes scrapes, each timed."""
    with measure.scratch("live-scrape") as d:
        script = measure.write_script(d, "sleeper.py", SLEEPER)
        port = _free_port()
        env = measure.clean_env(MPWATCH_SCRIPTED_NVML=_gpus(d, 8, ranks))
        with measure.Headless(d, script, "1.0", n=ranks, opts=["--metrics-port", port], env=env) as h:
            measure.wait_for(lambda: all(w["reports"] for w in h.status()["workers"]), 240, interval=1.0,
                             what=f"all {ranks} workers reporting")
            time.sleep(2.0)
            sup = psutil.Process(h.proc.pid)
            c0, t0 = _cpu(sup), time.monotonic()
            time.sleep(window)
            idle = 100.0 * (_cpu(sup) - c0) / (time.monotonic() - t0)
            walls, cpus, size = [], [], 0
            for _ in range(n_scrapes):
                t = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                    size = len(r.read())
                    cpus.append(float(r.headers["X-Mpwatch-Cpu-Seconds"]))
                walls.append(time.perf_counter() - t)
                time.sleep(0.1)
    walls.sort()
    cpus.sort()
    return {"wall_ms": 1000 * measure.median(walls), "max_ms": 1000 * walls[-1], "cpu_ms": 1000 * measure.median(cpus),
            "cpu_max_ms": 1000 * cpus[-1], "idle_pct": idle, "bytes": size}


def idle_without(ranks: int, window: float) -> float:
    """The same run's supervisor CPU without --metrics-port."""
    with measure.scratch("live-idle") as d:
        script = measure.write_script(d, "sleeper.py", SLEEPER)
        env = measure.clean_env(MPWATCH_SCRIPTED_NVML=_gpus(d, 8, ranks))
        with measure.Headless(d, script, "1.0", n=ranks, env=env) as h:
            measure.wait_for(lambda: all(w["reports"] for w in h.status()["workers"]), 240, interval=1.0,
                             what=f"all {ranks} workers reporting")
            time.sleep(2.0)
            sup = psutil.Process(h.proc.pid)
            c0, t0 = _cpu(sup), time.monotonic()
            time.sleep(window)
            return 100.0 * (_cpu(sup) - c0) / (time.monotonic() - t0)


def run(quick: bool = False) -> list[dict]:
    n, reps = (50_000, 3) if quick else (1_000_000, 7)
    under, outside, cmd = calls(n, reps)
    how = f"median of {reps} loops of {n} calls minus an empty loop, CPU time of the worker (its sender thread too)"
    rows = [row(f"{name}() per call, nothing due, under mpwatch, CPU", cmd, under[name], outside[name],
                alt_name="outside mpwatch (a no-op)", unit="µs", target=f"≤ {CALL_TARGET_US:g} µs",
                ok=under[name] <= CALL_TARGET_US, note=how)
            for name in ("should_checkpoint", "tunable")]
    ranks, scrapes, window = (16, 10, 3.0) if quick else (256, 50, 10.0)
    s = scrape(ranks, scrapes, window)
    scmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", str(ranks), "--metrics-port", "PORT",
                          "sleeper.py", "1.0"])
    load = psutil.getloadavg()[0]
    rows.append(row(f"Prometheus scrape of {ranks} ranks and 8 GPUs: the supervisor's CPU", scmd, s["cpu_ms"],
                    unit="ms", target=f"< {SCRAPE_TARGET_MS:g} ms", ok=s["cpu_ms"] < SCRAPE_TARGET_MS,
                    note=f"median of {scrapes} GETs of /metrics a tenth of a second apart (max {s['cpu_max_ms']:.1f} "
                         "ms), the request thread's CPU time as the server measures it: the status built under the "
                         f"run's lock, the families and their text ({s['bytes'] // 1024} KiB); workers report once a "
                         "second; GPUs from the scripted NVML"))
    rows.append(row(f"Prometheus scrape of {ranks} ranks and 8 GPUs: wall clock, from another process", scmd,
                    s["wall_ms"], unit="ms",
                    note=f"median of the same {scrapes} GETs, max {s['max_ms']:.0f} ms: on this machine the {ranks} "
                         f"workers and the supervisor's other threads share 2 cores with the request (load average "
                         f"{load:.1f}), so it mostly waits for a CPU and the GIL"))
    without = idle_without(ranks, window)
    rows.append(row(f"Supervisor CPU with --metrics-port, nobody scraping ({ranks} ranks)", scmd, s["idle_pct"],
                    without, alt_name="the same run without the flag", unit="% of a core",
                    note=f"over {window:g} s each, two runs of {ranks} workers: the server thread waits in select() "
                         "and builds nothing until a scrape comes (the difference is the noise between two runs)"))
    return rows
