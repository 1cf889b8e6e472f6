"""GPU poller: the supervisor's cost per tick (sample every GPU, label the processes, run the
alert decisions), with the scripted fake backend, and with real NVML where there is a GPU.

The fake run uses 8 GPUs, each holding one "worker" (a real sleeping child process of this
bench, so psutil's lookups are real) and two outsiders (this process and its parent). Its
figure is mpwatch's own Python overhead plus the fake's JSON lookups: an upper bound of
what the poller adds on top of the NVML calls themselves. Ticks that also query the
process list (every PROCS_EVERY) are reported apart.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench.harness import row
from mpwatch.probes import gpu as gpu_probe
from mpwatch.supervisor import gpu_watch
from mpwatch.supervisor.gpu_ranks import RankInfo

NGPUS = 8
TARGET_MS = 2.0  # per tick for 8 GPUs: 0.2% of a core at the default 1 s interval


def _time_ticks(watch, n: int) -> tuple[list, list]:
    """CPU milliseconds of this thread per tick: the poller's cost, which a busy machine's
    run queue (wall time) would blur."""
    plain, with_procs = [], []
    for _ in range(n):
        procs_due = watch.ticks % gpu_watch.PROCS_EVERY == 0
        t0 = time.thread_time()
        watch.tick()
        (with_procs if procs_due else plain).append((time.thread_time() - t0) * 1000.0)
    return plain, with_procs


def _watch(opener, workers):
    infos = [RankInfo(rank, pid, True) for pid, rank in workers.items()]
    w = gpu_watch.GpuWatch(1.0, workers=lambda: infos, emit=lambda *a, **k: None, env={}, opener=opener)
    if not w.open():
        return None, w.status
    return w, None


def _fake_rows(n: int) -> list[dict]:
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(NGPUS)]
    try:
        frames = [{"at": 0, "gpus": [
            {"util_gpu": 80, "util_mem": 30, "temperature": 60, "power_w": 250,
             "processes": [{"pid": kids[i].pid, "mem": 4 << 30}, {"pid": os.getpid(), "mem": 1 << 30},
                           {"pid": os.getppid(), "mem": 1 << 29}]} for i in range(NGPUS)]}]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"gpus": [{"name": f"Fake {i}", "mem_total": 80 << 30} for i in range(NGPUS)],
                       "frames": frames}, f)
        try:
            workers = {k.pid: i for i, k in enumerate(kids)}
            watch, why = _watch(lambda env: gpu_probe.open_backend({gpu_probe.FAKE_ENV: f.name}), workers)
            if watch is None:
                raise RuntimeError(why)
            _time_ticks(watch, 10)  # warm the psutil caches, as a running poller has them
            plain, procs = _time_ticks(watch, n)
            alerts = sum(len(v["alerts"]) for v in watch.snapshot()["gpus"])
        finally:
            os.unlink(f.name)
    finally:
        for k in kids:
            k.kill()
            k.wait()
    cmd = "python -m bench --only gpu"
    p_ms, q_ms = statistics.median(plain), statistics.median(procs)
    return [
        row(f"GPU poller: one tick, {NGPUS} GPUs (fake NVML)", cmd, p_ms, unit="ms", target=f"≤ {TARGET_MS:g} ms",
            ok=p_ms <= TARGET_MS,
            note=f"CPU time, median of {len(plain)} ticks: memory, utilization, temperature, power of each "
                 f"GPU, labels, {alerts} standing alerts re-evaluated"),
        row(f"GPU poller: a tick that also queries processes ({NGPUS} GPUs x 3, fake NVML)", cmd, q_ms, unit="ms",
            target=f"≤ {TARGET_MS * 2:g} ms", ok=q_ms <= TARGET_MS * 2,
            note=f"CPU time, median of {len(procs)} ticks (every {gpu_watch.PROCS_EVERY}th tick); psutil user/command "
                 f"lookups cached per process"),
    ]


def _real_rows(n: int) -> list[dict]:
    backend, why = gpu_probe.open_backend({})
    if backend is None:
        return [row("GPU poller: one tick, real NVML", note=f"skipped: {why}")]
    backend.shutdown()
    watch, why = _watch(lambda env: gpu_probe.open_backend({}), {})
    if watch is None:
        return [row("GPU poller: one tick, real NVML", note=f"skipped: {why}")]
    try:
        plain, procs = _time_ticks(watch, n)
        count = len(watch.probe.devices)
    finally:
        watch.close()
    cmd = "python -m bench --only gpu"
    return [
        row(f"GPU poller: one tick, real NVML ({count} GPU(s))", cmd, statistics.median(plain), unit="ms",
            note=f"CPU time, median of {len(plain)} ticks, NVML calls included"),
        row(f"GPU poller: a tick with the process query, real NVML ({count} GPU(s))", cmd,
            statistics.median(procs), unit="ms", note=f"CPU time, median of {len(procs)} ticks"),
    ]


def run(quick: bool = False) -> list[dict]:
    n = 50 if quick else 1000
    return _fake_rows(n) + _real_rows(n)


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv):
        print(r)
