"""GPU poller: the supervisor's cost per tick (sample every GPU, label the processes, place
each rank on its GPU by UUID, build the views, run the alert decisions, keep the timeline),
with the scripted NVML backend, and with real NVML where there is a GPU.

The scripted run has 8 GPUs, each holding one "worker" (a real sleeping child process of this
bench, so psutil's lookups are real) with its CUDA view (UUID and allocator counters) and
two outsiders (this process and its parent), every process with an SM utilization sample.
Its figure is mpwatch's own Python overhead plus the scripted backend's JSON lookups: an upper bound of
what the poller adds on top of the NVML calls themselves. Ticks that also query the process
list and the per-process utilization (every PROCS_EVERY) are reported apart.

Side by side: the same ticks of the poller before issue 12 (BASELINE, checked out with
`git archive` into a temporary directory and run in a subprocess), in the same run.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import measure
from bench.harness import row
from mpwatch.contract import CudaView
from mpwatch.probes.gpu import open_backend
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor.gpu.ranks import RankInfo
from mpwatch.supervisor.gpu.watch import PROCS_EVERY, GpuWatch

NGPUS = 8
TARGET_MS = 2.0  # per tick for 8 GPUs: 0.2% of a core at the default 1 s interval
BASELINE = "c74735e"  # main before issue 12: the poller without UUIDs, SM samples, ranks' views or timeline
CMD = "python -m bench --only gpu"


def _time_ticks(watch: GpuWatch, n: int) -> tuple[list[float], list[float]]:
    """CPU milliseconds of this thread per tick: the poller's cost, which a busy machine's
    run queue (wall time) would blur."""
    plain, with_procs = [], []
    for _ in range(n):
        procs_due = watch.ticks % PROCS_EVERY == 0
        t0 = time.thread_time()
        watch.tick()
        (with_procs if procs_due else plain).append((time.thread_time() - t0) * 1000.0)
    return plain, with_procs


def _scenario(kids: list[subprocess.Popen[bytes]]) -> dict[str, object]:
    return {"gpus": [{"name": f"Fake {i}", "mem_total": 80 << 30, "uuid": f"GPU-bench-{i}"} for i in range(NGPUS)],
            "frames": [{"at": 0, "gpus": [
                {"util_gpu": 80, "util_mem": 30, "temperature": 60, "power_w": 250,
                 "processes": [{"pid": kids[i].pid, "mem": 30 << 30, "sm": 75},
                               {"pid": os.getpid(), "mem": 5 << 30, "sm": 3},
                               {"pid": os.getppid(), "mem": 1 << 29}]} for i in range(NGPUS)]}]}


def scripted_ticks(n: int) -> tuple[list[float], list[float], int]:
    """(plain ticks ms, ticks with the process query ms, standing alerts) on 8 scripted GPUs."""
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(NGPUS)]
    tmp = Path(tempfile.mkdtemp(prefix="mpwatch-bench-gpu-"))
    try:
        path = tmp / "nvml.json"
        path.write_text(json.dumps(_scenario(kids)))
        views: list[CudaView] = [{"device": 0, "allocated": 20 << 30, "reserved": 26 << 30, "max_allocated": 22 << 30,
                                  "uuid": f"GPU-bench-{i}", "alloc_retries": 0, "num_ooms": 0,
                                  "inactive_split": 1 << 30} for i in range(NGPUS)]
        infos = [RankInfo(i, k.pid, True, True, [], views[i]) for i, k in enumerate(kids)]
        watch = GpuWatch(1.0, workers=lambda: infos, emit=lambda rank, **f: None, env={}, settings=Settings(),
                         opener=lambda _: open_backend(str(path)), timeline=RunStore(tmp, Settings()))
        if not watch.open():
            raise RuntimeError(watch.status)
        _time_ticks(watch, 10)  # warm the psutil caches, as a running poller has them
        plain, procs = _time_ticks(watch, n)
        alerts = sum(len(v["alerts"]) for v in watch.snapshot()["gpus"])
        watch.close()
    finally:
        for k in kids:
            k.kill()
            k.wait()
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return plain, procs, alerts


def _baseline(n: int) -> tuple[float, float] | str:
    """Median (plain, with processes) ms of the BASELINE poller, or why there is none."""
    with measure.tree_at(BASELINE) as tmp:
        if isinstance(tmp, str):
            return tmp
        # the baseline's rows: `_fake_rows` there (issue 28 renamed the fake NVML to the scripted one)
        code = ("import json, statistics, sys; from bench import bench_gpu as b; "
                f"rows = getattr(b, '_scripted_rows', getattr(b, '_fake_rows', None))({n}); "
                "print(json.dumps([r['mpwatch'] for r in rows]))")
        res = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=str(tmp)), timeout=600)
        if res.returncode != 0:
            return f"baseline {BASELINE} failed: {res.stderr.strip().splitlines()[-1:]}"
        plain, procs = json.loads(res.stdout.strip().splitlines()[-1])
        return float(plain), float(procs)


def _scripted_rows(n: int) -> list[dict[str, object]]:
    base = _baseline(n)
    plain, procs, alerts = scripted_ticks(n)
    p_ms, q_ms = statistics.median(plain), statistics.median(procs)
    old_p, old_q = base if isinstance(base, tuple) else (None, None)
    why = "" if isinstance(base, tuple) else f"; {base}"
    alt = f"before issue 12 ({BASELINE})"
    return [
        row(f"GPU poller: one tick, {NGPUS} GPUs (scripted NVML)", CMD, p_ms, old_p, alt, unit="ms",
            target=f"≤ {TARGET_MS:g} ms", ok=p_ms <= TARGET_MS,
            note=f"CPU time, median of {len(plain)} ticks: memory, utilization, temperature, power of each GPU, "
                 f"labels, ranks placed by UUID, worker views, breakdown, history, {alerts} standing alerts "
                 f"re-evaluated, the timeline{why}"),
        row(f"GPU poller: a tick that also queries processes and their SM utilization ({NGPUS} GPUs x 3, scripted NVML)",
            CMD, q_ms, old_q, alt, unit="ms", target=f"≤ {TARGET_MS * 2:g} ms", ok=q_ms <= TARGET_MS * 2,
            note=f"CPU time, median of {len(procs)} ticks (every {PROCS_EVERY}th tick); psutil "
                 f"user/command lookups cached per process{why}"),
    ]


def _real_rows(n: int) -> list[dict[str, object]]:
    backend, why = open_backend(None)
    if backend is None:
        return [row("GPU poller: one tick, real NVML", note=f"skipped: {why}")]
    backend.shutdown()
    watch = GpuWatch(1.0, workers=list, emit=lambda rank, **f: None, env={}, settings=Settings(),
                     opener=lambda _: open_backend(None))
    if not watch.open() or watch.probe is None:
        return [row("GPU poller: one tick, real NVML", note=f"skipped: {watch.status}")]
    try:
        plain, procs = _time_ticks(watch, n)
        count = len(watch.probe.devices)
        sm = "per-process SM utilization N/A here" if not all(d.proc_util_ok for d in watch.probe.devices) else \
            "with per-process SM utilization"
    finally:
        watch.close()
    return [
        row(f"GPU poller: one tick, real NVML ({count} GPU(s))", CMD, statistics.median(plain), unit="ms",
            note=f"CPU time, median of {len(plain)} ticks, NVML calls included"),
        row(f"GPU poller: a tick with the process query, real NVML ({count} GPU(s))", CMD,
            statistics.median(procs), unit="ms", note=f"CPU time, median of {len(procs)} ticks; {sm}"),
    ]


def run(quick: bool = False) -> list[dict[str, object]]:
    n = 50 if quick else 1000
    return _scripted_rows(n) + _real_rows(n)


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv):
        print(r)
