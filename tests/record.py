"""Record statuses from real runs, for the TUI's tests and snapshots (readers are fed what
the producer sends, never dictionaries written by hand). One command regenerates them all:

    PYTHONPATH=$PWD .venv/bin/python -m tests.record [SCENARIO ...]   # all when none is named

Each scenario starts a real headless supervisor (tests/helpers.HeadlessRun) on real workers
(tests/record_worker.py), with a scripted NVML (MPWATCH_SCRIPTED_NVML) and scripted allocator
views of the workers' torch (MPWATCH_SCRIPTED_CUDA: CI has no GPU) where it has GPUs; waits
until the run meets the scenario's named conditions (`Scenario.expect`: each alert kind and
state it is for; it fails naming those that never held, so re-recording never loses one
quietly); and writes tests/data/statuses/<scenario>.json
(see `record`): the status (`ctl status --json`), the events the TUI received, the
--headless lines the supervisor printed for them, each rank's loss history and log tails,
the stack dumps the status points to, and the GPU timeline (`gpu_timeline`, per window).

Normalised, so that the files and the snapshots drawn from them are stable and carry nothing
of this machine, and nothing else: pids (the supervisor 40000, rank r's worker 41000+100r,
its children after it, other processes from 52000), wall-clock times (shifted so that the run
started at EPOCH, to 0.1 s), paths (the checkout, the Python installation, the run directory)
and user names. Durations (uptime, heartbeat ages, steps/s) are kept as the run measured them.
"""
from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpwatch.contract import rank_state
from mpwatch.sources.local import Client, ClientError
from tests.helpers import ROOT, HeadlessRun, TakenMachine, wait_for

DATA = ROOT / "tests" / "data" / "statuses"
WORKER = ROOT / "tests" / "record_worker.py"
AUTO_LOOP = ROOT / "tests" / "fixtures" / "auto_loop.py"
EPOCH = 1767225600.0  # 2026-01-01 00:00 UTC: when every recorded run "started"
GiB = 1 << 30
MiB = 1 << 20
TIMELINE_WINDOWS = (120, 600, 3600)  # the GPU screen's 2 min, 10 min and 1 h

PID_KEYS = {"pid", "ppid", "pgid", "pids", "foreign_groups"}
TIME_KEYS = {"ts", "since", "started", "processes_ts", "paused_at", "best_at"}
# Where a text names a pid: "pid 4242", "pids 1, 2", py-spy's "Process 4242" and "Thread 4242".
# Where a text names a wall-clock time: "paused at 17:35:20" (a finding, a note), "restarted at" (a log's marker),
# "since 17:35:20" (a slowdown), "slower from" (its end).
_CLOCK_IN_TEXT = re.compile(r"(\bpaused at |\brestarted at |\bsince |\bslower from )(\d\d:\d\d:\d\d)\b")
_PID_IN_TEXT = re.compile(r"(\bpids? |pid=|could not kill: |\bProcess |\bThread )(\d+(?:, \d+)*)")


def unused_pid() -> int:
    """A pid no process here can have: as a process in another PID namespace looks."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 7


# ------------------------------------------------------------------ scenarios ----
def _proc(pid: object, gib: float, sm: int | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"pid": pid, "mem": int(gib * GiB)}
    if sm is not None:
        p["sm"] = sm
    return p


def uuid(i: int) -> str:
    return f"GPU-{0x5a1c9e2b + 0x1111 * i:08x}-7d3f-4c11-9a8e-{0x0b6f2d4e8c17 + i:012x}"


def _cuda(at: float, gpu: int, alloc: float, reserved: float, peak: float, **extra: int) -> dict[str, Any]:
    """A frame of the scripted allocator view (MPWATCH_SCRIPTED_CUDA): what torch would say."""
    return {"at": at, "device": 0, "uuid": uuid(gpu), "allocated": int(alloc * GiB),
            "reserved": int(reserved * GiB), "max_allocated": int(peak * GiB), **extra}


GROW_FROM, GROW_TO = 6, 100  # the recorder's gpu2: memory and allocator retries keep rising over these seconds
GROW_GIB_S = 0.15  # a rank, a second


def nvml_two_gpus(ghost: int, outside: float = 2.1, grow: bool = False) -> dict[str, Any]:
    """Issue #12's scenario: ranks 0 and 1 both on GPU 0 at 93%, rank 0's child (a
    DataLoader-like worker) holding memory there too, a process outside the run (the
    recorder, which is the supervisor's parent; `outside` GiB) and one in another PID
    namespace; GPU 1 idle. Memory ramps up over the first seconds, so the history has a
    shape; then it stays (what the end-to-end tests compare the screen with), or, with
    `grow` (the recorder's), the ranks' memory keeps rising until GROW_TO s (a leak)."""
    def gpu0(util: int, r0: float, r1: float, child: float) -> dict[str, Any]:
        return {"util_gpu": util, "util_mem": util // 2, "temperature": 45 + util // 4, "power_w": 120 + 5 * util,
                "extra_used": 600 * MiB,
                "processes": [_proc("rank:0", r0, util // 2), _proc("rank:1", r1, util // 2 - 4),
                              _proc("rank:0/child", child, 0), _proc("parent", outside, 3), _proc(ghost, 0.3)]}
    idle = {"util_gpu": 0, "util_mem": 0, "temperature": 33, "power_w": 61.0, "extra_used": 0, "processes": []}
    frames = [{"at": 0, "gpus": [gpu0(35, 4.0, 3.5, 0.5), idle]},
              {"at": 2, "gpus": [gpu0(71, 11.0, 10.2, 1.0), idle]},
              {"at": 4, "gpus": [gpu0(88, 16.4, 15.1, 1.5), idle]},
              {"at": 6, "gpus": [gpu0(93, 19.6, 18.2, 1.5), idle]}]
    if grow:
        frames += [{"at": t, "gpus": [gpu0(93, 19.6 + GROW_GIB_S * (t - GROW_FROM), 18.2 + GROW_GIB_S * (t - GROW_FROM),
                                           1.5), idle]} for t in range(GROW_FROM + 2, GROW_TO + 1, 2)]
    return {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * GiB, "uuid": uuid(0)},
                     {"name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * GiB, "uuid": uuid(1)}],
            "frames": frames}


def cuda_two_gpus(grow: bool = False) -> dict[str, Any]:
    """Both ranks' torch says device 0, the same GPU: the collision; rank 1's allocator
    starts to retry (with `grow`: its tensors keep growing, and it retries every 2 s)."""
    ranks = {
        "0": [_cuda(0, 0, 2.1, 3.0, 2.4), _cuda(2, 0, 8.2, 9.6, 8.9), _cuda(4, 0, 12.5, 14.6, 13.1),
              _cuda(6, 0, 14.2, 17.8, 16.9)],
        "1": [_cuda(0, 0, 1.9, 2.6, 2.2), _cuda(2, 0, 7.6, 8.8, 8.0), _cuda(4, 0, 11.3, 13.4, 12.0),
              _cuda(6, 0, 13.1, 16.4, 15.0, alloc_retries=2)]}
    if grow:
        for t in range(GROW_FROM + 2, GROW_TO + 1, 2):
            more = GROW_GIB_S * (t - GROW_FROM)
            ranks["0"].append(_cuda(t, 0, 14.2 + more, 17.8 + more, 16.9 + more))
            ranks["1"].append(_cuda(t, 0, 13.1 + more, 16.4 + more, 15.0 + more, alloc_retries=2 + (t - GROW_FROM) // 2))
    return {"ranks": ranks}


def nvml_container(host: int) -> dict[str, Any]:
    """Issue #20's container: NVML lists the ranks' processes under the host's pids (host,
    host+1: none of them a pid here), each on its own GPU, a little more every second."""
    def gpu(pid: int, gib: float, util: int) -> dict[str, Any]:
        return {"util_gpu": util, "util_mem": util // 3, "temperature": 50, "power_w": 300.0,
                "extra_used": 500 * MiB, "processes": [_proc(pid, gib, util)]}
    return {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * GiB, "uuid": uuid(20 + i)} for i in range(2)],
            "frames": [{"at": at, "gpus": [gpu(host, 12.0 * s, int(90 * s)), gpu(host + 1, 11.0 * s, int(88 * s))]}
                       for at, s in ((0, 0.5), (2, 0.9), (4, 1.0))]}


def cuda_container() -> dict[str, Any]:
    """Each rank's torch on its own GPU (by UUID), holding most of what NVML counts there."""
    return {"ranks": {str(r): [_cuda(at, 20 + r, gib * s * 0.8, gib * s * 0.95, gib * s * 0.85)
                               for at, s in ((0, 0.5), (2, 0.9), (4, 1.0))]
                      for r, gib in ((0, 12.0), (1, 11.0))}}


def nvml_mig(ghost: int) -> dict[str, Any]:
    """Issue 33's MIG GPU, as a user (not root) sees it: an A100 split in three slices; ranks 0
    and 1 both on the 3g.40gb one (a collision; it fills up), rank 2 alone on the 2g.20gb one
    beside a process of another user (the recorder: its memory not available to a user), a
    process of another PID namespace on the 1g.10gb one; the GPU's own memory and process list
    refused (root's), its SM clock held by the power cap, the driver's reserve on the first slice
    told apart from what is used (MemoryInfo_v2). Played by the stand-in
    libnvidia-ml.so.1 under nvidia-ml-py (the Python stand-in plays the same alike)."""
    def frame(s: float) -> dict[str, Any]:
        return {"temperature": 58 + int(6 * s), "power_w": 180.0 + 140 * s, "sm_clock": 1275, "sm_clock_max": 1410,
                "throttle": ["sw_power_cap"], "fail": ["memory:NO_PERMISSION", "processes:NO_PERMISSION"],
                "slices": [{"extra_used": 512 * MiB, "reserved": 256 * MiB,  # the driver's own, apart (v2)
                            "processes": [_proc("rank:0", 17.5 * s), _proc("rank:1", 19.0 * s)]},
                           {"extra_used": 256 * MiB, "processes": [_proc("rank:2", 9.0 * s),
                                                                   {"pid": "parent", "mem": None}]},
                           {"processes": [_proc(ghost, 1.5)]}]}
    migs = [{"uuid": mig_uuid(1), "gi": 1, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB},
            {"uuid": mig_uuid(2), "gi": 2, "ci": 0, "profile": "2g.20gb", "mem_total": 20 * GiB},
            {"uuid": mig_uuid(3), "gi": 9, "ci": 0, "profile": "1g.10gb", "mem_total": 10 * GiB}]
    return {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "mem_total": 80 * GiB, "uuid": uuid(30), "mig": migs}],
            "frames": [{"at": at, "gpus": [frame(s)]} for at, s in ((0, 0.4), (2, 0.7), (4, 0.9), (6, 1.0))]}


def mig_uuid(i: int) -> str:
    return f"MIG-{0x7c3e5a10 + 0x101 * i:08x}-2b4d-5e6f-8a9b-{0x1c2d3e4f5a6b + i:012x}"


def cuda_mig() -> dict[str, Any]:
    """Each rank's torch on its MIG slice, named by its MIG UUID (its CUDA_VISIBLE_DEVICES)."""
    def on(slot: int, gib: float) -> list[dict[str, Any]]:
        return [{"at": at, "device": 0, "uuid": mig_uuid(slot), "allocated": int(gib * s * 0.8 * GiB),
                 "reserved": int(gib * s * 0.92 * GiB), "max_allocated": int(gib * s * 0.85 * GiB)}
                for at, s in ((0, 0.4), (2, 0.7), (4, 0.9), (6, 1.0))]
    return {"ranks": {"0": on(1, 17.5), "1": on(1, 19.0), "2": on(2, 9.0)}}


EIGHT_USES = [30.1, 41.7, 44.0, 39.5, 42.2, 76.3, 40.8, 2.0]  # GiB each rank holds on its own GPU
EIGHT_UTILS = [97, 95, 96, 94, 92, 99, 95, 0]


def nvml_eight_gpus() -> dict[str, Any]:
    """Eight ranks, one a GPU, every rank also holding a stray context on GPU 0 (the classic
    "all on GPU 0" mistake), GPU 5 nearly full, GPU 7 idle while the others work."""
    frames = []
    for at, scale in ((0, 0.5), (2, 0.8), (4, 1.0)):
        gpus = []
        for i in range(8):
            util = int(EIGHT_UTILS[i] * min(1.0, scale + 0.2))
            procs = [_proc(f"rank:{i}", EIGHT_USES[i] * scale, util)]
            if i == 0:
                procs += [_proc(f"rank:{r}", 0.5, 0) for r in range(1, 8)]
            gpus.append({"util_gpu": util, "util_mem": EIGHT_UTILS[i] // 3,
                         "temperature": 40 + EIGHT_UTILS[i] // 3, "power_w": 100.0 + 6 * EIGHT_UTILS[i],
                         "extra_used": 400 * MiB, "processes": procs})
        frames.append({"at": at, "gpus": gpus})
    return {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "mem_total": 80 * GiB, "uuid": uuid(i)} for i in range(8)],
            "frames": frames}


def cuda_eight_gpus() -> dict[str, Any]:
    """Each rank's torch on its own GPU; rank 5 fragmented (much reserved, little allocated,
    on a nearly full GPU) and retrying."""
    ranks: dict[str, Any] = {}
    for i, use in enumerate(EIGHT_USES):
        frames = [_cuda(at, i, use * scale * 0.7, use * scale * 0.9, use * scale * 0.75)
                  for at, scale in ((0, 0.5), (2, 0.8), (4, 1.0))]
        ranks[str(i)] = frames
    ranks["5"] = [_cuda(0, 5, 20.0, 36.0, 24.0), _cuda(2, 5, 38.0, 60.0, 41.0, alloc_retries=1),
                  _cuda(4, 5, 47.5, 74.0, 52.3, alloc_retries=6)]
    return {"ranks": ranks}


def nvml_oom() -> dict[str, Any]:
    """Issue 33's OOM: the contention demo's mistake (ranks 0 and 1 both on GPU 0), rank 2 on GPU 1
    with a stray context on GPU 0, the recorder outside the run there too; GPU 0 fills up."""
    def gpu0(s: float) -> dict[str, Any]:
        return {"util_gpu": 97, "util_mem": 41, "temperature": 71, "power_w": 640.0, "extra_used": 0,
                "processes": [_proc("rank:0", 30.0 * s, 45), _proc("rank:1", 42.0 * s, 50), _proc("rank:2", 1.5, 0),
                              _proc("parent", 5.5, 2)]}

    def gpu1(s: float) -> dict[str, Any]:
        return {"util_gpu": int(92 * s), "util_mem": 30, "temperature": 60, "power_w": 500.0, "extra_used": 0,
                "processes": [_proc("rank:2", 22.0 * s, int(92 * s))]}
    return {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * GiB, "uuid": uuid(30 + i)} for i in range(2)],
            "frames": [{"at": at, "gpus": [gpu0(s), gpu1(s)]} for at, s in ((0, 0.5), (2, 0.9), (4, 1.0))]}


def cuda_oom() -> dict[str, Any]:
    """Their torch: ranks 0 and 1 on GPU 0 (torch's device 0 of each), rank 2 on GPU 1; rank 0's
    allocator nearly all allocated, 1 GiB left free on the GPU for its next 2 GiB."""
    def frames(gpu: int, alloc: float, reserved: float, **more: int) -> list[dict[str, Any]]:
        return [_cuda(at, gpu, alloc * s, reserved * s, alloc * s, **more) for at, s in ((0, 0.5), (2, 0.9), (4, 1.0))]
    return {"ranks": {"0": frames(30, 29.0, 29.4, total=80 * GiB, free=GiB), "1": frames(30, 41.0, 41.5),
                      "2": frames(31, 20.0, 21.0)}}


def nvml_node(node: int) -> dict[str, Any]:
    """A node of the two-node scenario: two GPUs, ranks 0 and 1 on GPU 0, ranks 2 and 3 on
    GPU 1 (node 1's second GPU less busy), memory ramping up over the first seconds."""
    def gpu(i: int, scale: float) -> dict[str, Any]:
        util = int((88 - 30 * node * i) * scale)
        use = (31.5 + 4 * node + 3 * i) * scale
        return {"util_gpu": util, "util_mem": util // 3, "temperature": 40 + util // 3, "power_w": 150.0 + 4 * util,
                "extra_used": 500 * MiB,
                "processes": [_proc(f"rank:{2 * i}", use, util // 2), _proc(f"rank:{2 * i + 1}", use * 0.9, util // 2)]}
    frames = [{"at": at, "gpus": [gpu(0, scale), gpu(1, scale)]} for at, scale in ((0, 0.4), (2, 0.8), (4, 1.0))]
    return {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * GiB, "uuid": uuid(10 * node + i)}
                     for i in range(2)], "frames": frames}


Check = Callable[[dict[str, Any]], bool]


class Scenario:
    """A recorded scenario: the run to start, and the named conditions its status must meet
    (`expect`: what the scenario is for; the recorder waits for all of them, and fails naming
    those that never held; tests/test_recordings.py checks the stored status still meets them)."""

    def __init__(self, name: str, n: int, env: dict[str, str], opts: list[str], expect: dict[str, Check],
                 nvml: Callable[[], dict[str, Any]] | None = None, cuda: Callable[[], dict[str, Any]] | None = None,
                 setup: Callable[[HeadlessRun], None] | None = None, script: Path = WORKER,
                 args: tuple[str, ...] = (), workdir: bool = False, details: bool = True, final: bool = False,
                 libnvml: bool = False, ready: float | None = None):
        self.name = name
        self.script = script  # the workers' script (a real torch job for the process-group scenarios)
        self.args = args
        self.n = n
        self.env = env
        self.opts = opts
        self.expect = expect
        self.nvml = nvml  # the scripted NVML (MPWATCH_SCRIPTED_NVML)
        self.cuda = cuda  # the scripted allocator views of the ranks (MPWATCH_SCRIPTED_CUDA)
        self.setup = setup  # what to do to the run once it runs (pause a rank...)
        self.workdir = workdir  # the workers start in an empty folder of their own, not the recorder's
        self.details = details  # each rank's loss history and log tails too (not for 256 ranks)
        self.final = final  # then stop the run and keep its final.json (`final`: a finished run's last status)
        self.libnvml = libnvml  # `nvml` played by the stand-in libnvidia-ml.so.1 (MIG, clocks), not the Python one
        self.ready = ready  # how long its conditions may take to hold (READY_S unless it says)

    def unmet(self, st: dict[str, Any]) -> list[str]:
        """The conditions this status does not meet (none: the scenario is ready). Every rank
        listed first: a condition over all workers holds vacuously before they are spawned."""
        if len(st["workers"]) < self.n:
            return [f"all {self.n} ranks listed ({len(st['workers'])} so far)"]
        out = []
        for what, check in self.expect.items():
            try:
                ok = check(st)
            except (KeyError, IndexError, TypeError, StopIteration):  # a rank or a GPU not there yet
                ok = False
            if not ok:
                out.append(what)
        return out


def _w(st: dict[str, Any], rank: int) -> dict[str, Any]:
    return next(w for w in st["workers"] if w["rank"] == rank)


def gpu_alerts(*kinds: str) -> dict[str, Check]:
    return {f"GPU alert {k}": (lambda st, k=k: any(a["kind"] == k for g in st["gpus"] for a in g["alerts"]))
            for k in kinds}


def run_alerts(*kinds: str) -> dict[str, Check]:
    return {f"run alert {k}": (lambda st, k=k: any(a["kind"] == k for a in st["alerts"])) for k in kinds}


def states(**by_rank: str) -> dict[str, Check]:
    """r0="running", r3="failed": each rank reached its state."""
    return {f"rank {r[1:]} {state}": (lambda st, r=int(r[1:]), state=state: _w(st, r)["state"] == state)
            for r, state in by_rank.items()}


def gpu_history(points: int) -> dict[str, Check]:
    return {f"{points} points of GPU history": lambda st: all(len(g["history"]["mem_used"]) >= points
                                                               for g in st["gpus"])}


def on_gpus(n_gpus: int) -> dict[str, Check]:
    return {f"{n_gpus} GPUs": lambda st: len(st["gpus"]) == n_gpus,
            "every rank stepping on its GPU, with its torch view": lambda st: all(
                w["gpu"] is not None and w["gpu"]["index"] is not None and w["gpu"]["allocated"] is not None
                and w["step"] is not None for w in st["workers"])}


AUTO: dict[str, Check] = {  # what the auto scenario is for: a torch loop's steps counted by mpwatch.worker.auto
    "every rank past step 60, automatically": lambda st: all(
        (w["step"] or 0) >= 60 and w["steps_from"] == "auto" for w in st["workers"]),
    "steps/s and the TIME split": lambda st: all(w["steps_per_s"] and w["phases"] for w in st["workers"]),
    "a DataLoader worker each": lambda st: all(w["children"] for w in st["workers"]),
    "a loss trend": lambda st: all(len(w["loss_tail"]) >= 4 for w in st["workers"]),
}


def _pause_rank_2(run: HeadlessRun) -> None:
    wait_for(lambda: _w(run.status(), 2)["step"] is not None, 60, what="rank 2 reporting")
    run.ctl("pause", "2")


def _pause_rank_1(run: HeadlessRun) -> None:
    wait_for(lambda: all((w["step"] or 0) >= 10 for w in run.status()["workers"]), 180, what="three ranks stepping")
    run.ctl("pause", "1")


def _hold_ranks(run: HeadlessRun) -> None:
    """Issue 41: the three ranks held above the other jobs of this machine once they step
    (tests.helpers.TakenMachine), so that its noise slows them no more than the scenario does."""
    pids = wait_for(lambda: (lambda ws: [w["pid"] for w in ws] if len(ws) == 3 and all(w["step"] for w in ws)
                             else None)(run.status()["workers"]), 180, what="three ranks stepping")
    TakenMachine().hold(pids)


def _kill_rank_2(run: HeadlessRun) -> None:
    wait_for(lambda: (_w(run.status(), 2)["step"] or 0) >= 5, 60, what="rank 2 reporting")
    run.ctl("kill", "2")


def _oom_rank_0(run: HeadlessRun) -> None:
    """Once every rank is on its GPU with its torch view and GPU 0 is full, its process list naming
    the three ranks, rank 0 allocates until it runs out."""
    def full(st: dict[str, Any]) -> bool:
        g0 = st["gpus"][0] if st["gpus"] else None
        return bool(g0 and (g0["mem_used"] or 0) >= 75 * GiB and {p["rank"] for p in g0["processes"]} >= {0, 1, 2}
                    and all(w["gpu"] and w["gpu"]["allocated"] for w in st["workers"]))
    wait_for(lambda: full(run.status()), 120, what="every rank on its GPU, GPU 0 full")
    (run.cwd / "go").write_text("")


def _profile_ranks(run: HeadlessRun) -> None:
    """Issue 32: a profile of both ranks (written), then a long one of rank 1 (running when recorded)."""
    wait_for(lambda: all((w["step"] or 0) >= 5 for w in run.status()["workers"]), 180,
             what="two ranks stepping")
    run.ctl("profile", "all", "--steps", "3")
    run.wait_event("profile_written", timeout=120, count=2)
    run.ctl("profile", "1", "--steps", "50")


def _profile(st: dict[str, Any], rank: int, which: int = 0) -> dict[str, Any]:
    req = st["profiles"][which]
    return {"state": rank_state(req, rank, req["results"]),
            "top": next((r["top"] for r in req["results"] if r["rank"] == rank), [])}


PROFILE: dict[str, Check] = {  # what the profile scenario is for: traces and their operators, one running
    "both ranks' traces written, with their top operators": lambda st: all(
        _profile(st, r)["state"] == "written" and _profile(st, r)["top"] for r in (0, 1)),
    "rank 1's second profile running": lambda st: _profile(st, 1, -1)["state"] == "running",
}


def _tune(run: HeadlessRun) -> None:
    """batch set now (both ranks take it), lr set for a step far ahead (pending), a checkpoint of all."""
    run.wait_event("tunable_declared", count=4)
    wait_for(lambda: all((w["step"] or 0) >= 3 for w in run.status()["workers"]), 60, what="both ranks stepping")
    run.ctl("set", "batch", "64")
    run.wait_event("tunable_applied", count=2, timeout=60)
    run.ctl("set", "lr", "0.03", "--at-step", str(FAR_STEP))
    run.ctl("checkpoint", "all")
    run.wait_event("checkpoint_taken", count=2, timeout=60)


FAR_STEP = 999999  # the control scenario's pending change: a step the run never reaches


def _tunable(st: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in st["tunables"] if t["name"] == name)


CONTROL: dict[str, Check] = {  # issue 31: a value in force and a change still pending, side by side
    "batch 64 in force, taken by both ranks": lambda st: _tunable(st, "batch")["value"] == 64 and len(
        _tunable(st, "batch")["changes"][-1]["answers"]) == 2,
    "lr 0.1 in force, 0.03 pending from a step far ahead": lambda st: _tunable(st, "lr")["value"] == 0.1 and (
        _tunable(st, "lr")["changes"][-1]["pending"] and _tunable(st, "lr")["changes"][-1]["step"] == FAR_STEP),
    "a checkpoint taken by both ranks": lambda st: len(st["checkpoints"][-1]["answers"]) == 2,
}


def _gpu2(st: dict[str, Any]) -> dict[str, Any]:
    procs = st["gpus"][0]["processes"]
    return {p: [x for x in procs if f(x)] for p, f in (
        ("child", lambda x: x["child_of"] == 0), ("hidden", lambda x: not x["visible"]),
        ("outside", lambda x: x["visible"] and x["rank"] is None and x["child_of"] is None))}


def scenarios(ghost: int) -> dict[str, Scenario]:
    gpu2 = {**on_gpus(2), **gpu_history(20), **gpu_alerts("contention", "outside", "memory_high", "alloc_retries"),
            "rank 0's child on GPU 0": lambda st: bool(_gpu2(st)["child"]),
            "a process of another PID namespace on GPU 0": lambda st: bool(_gpu2(st)["hidden"]),
            "a process outside the run on GPU 0": lambda st: bool(_gpu2(st)["outside"])}
    gpu8 = {**on_gpus(8), **gpu_history(20),
            **gpu_alerts("stray_context", "memory_high", "fragmentation", "alloc_retries", "idle"),
            "every rank's stray context on GPU 0": lambda st: len(st["gpus"][0]["processes"]) >= 8}
    state_ranks = {**states(r0="running", r1="stalled", r2="paused", r3="failed", r4="running"),
                   "rank 0 with a child": lambda st: bool(_w(st, 0)["children"]),
                   "rank 0's loss below 0.01 (step 200)": lambda st: (_w(st, 0)["step"] or 0) > 200,
                   "rank 1 stuck in its frame": lambda st: bool((_w(st, 1)["stall"] or {}).get("where")),
                   "rank 3 restarted once": lambda st: _w(st, 3)["restarts"] == 1,
                   "rank 4 back after its restart": lambda st: _w(st, 4)["restarts"] == 1 and (_w(st, 4)["step"] or 0) > 45,
                   # the stepping ranks' paces compared (contract.pace: enough steps and seconds each)
                   "ranks 0 and 4 paced against each other": lambda st: all(
                       (_w(st, r)["pace"] or {}).get("relative") for r in (0, 4))}
    container = {**on_gpus(2), "6 s of GPU data": lambda st: st["run"]["uptime"] >= 6,
                 "each GPU lists its rank's process": lambda st: all(g["processes"] for g in st["gpus"]),
                 "the GPU line says the pids are not visible": lambda st: "not visible" in (st["gpu_status"] or ""),
                 "nobody is an outsider": lambda st: not any(a["kind"] == "outside" for g in st["gpus"]
                                                             for a in g["alerts"])}
    paused = {**states(r0="stalled", r1="paused", r2="stalled"), **run_alerts("hang"),
              "the finding names the paused rank 1": lambda st: "for rank 1, which was paused at" in next(
                  a["message"] for a in st["alerts"] if a["kind"] == "hang"),
              "ranks 0 and 2 stuck in their collective": lambda st: all(
                  (_w(st, r)["stall"] or {}).get("collective") for r in (0, 2))}
    mig = {"1 GPU in MIG mode, 3 slices": lambda st: len(st["gpus"]) == 1 and len(st["gpus"][0]["slices"]) == 3,
           **gpu_history(10),
           "every rank on its slice, with its torch view": lambda st: all(
               w["gpu"] is not None and "mig" in w["gpu"] and w["gpu"]["allocated"] is not None for w in st["workers"]),
           "ranks 0 and 1 contend on the 3g.40gb slice": lambda st: any(
               a["kind"] == "contention" for a in st["gpus"][0]["slices"][0]["alerts"]),
           "the 3g.40gb slice nearly full": lambda st: any(
               a["kind"] == "memory_high" for a in st["gpus"][0]["slices"][0]["alerts"]),
           "the GPU's memory and process list need root": lambda st: st["gpus"][0]["errors"].get("memory")
           == st["gpus"][0]["errors"].get("processes") == "needs root on this MIG GPU",
           "another user's process memory not available": lambda st: "process_memory" in st["gpus"][0]["slices"][1]["errors"],
           "the SM clock held by the power cap": lambda st: "sw_power_cap" in (st["gpus"][0]["throttle_reasons"] or [])}
    wide = {"256 ranks, every one stepping": lambda st: len(st["workers"]) == 256 and all(
        w["state"] == "running" and (w["step"] or 0) >= 3 for w in st["workers"])}
    stragglers = {**run_alerts("straggler"),
                  "the finding names rank 1 and its forward": lambda st: next(
                      a["message"] for a in st["alerts"] if a["kind"] == "straggler").startswith(
                      "rank 1 is the straggler: its forward takes"),
                  "every rank's pace against the others": lambda st: all(
                      w["pace"] and w["pace"]["relative"] for w in st["workers"]),
                  "the finding has cost the run 5 s": lambda st: next(
                      a["straggler"]["lost_s"] for a in st["alerts"] if a["kind"] == "straggler") > 5}
    slowdowns = {**run_alerts("slowdown"),
                 "the finding names every rank's data": lambda st: "every rank's data takes " in next(
                     a["message"] for a in st["alerts"] if a["kind"] == "slowdown"),
                 "the run's pace under 0.75x its best": lambda st: st["run"]["pace"]["ratio"] < 0.75,
                 "the finding has cost the run 20 steps": lambda st: next(
                     a["slowdown"]["lost_steps"] for a in st["alerts"] if a["kind"] == "slowdown") > 20}
    ended = {**states(r0="running", r1="exited", r2="killed", r3="failed"),
             "rank 3 could not start": lambda st: (_w(st, 3)["cause"] or "").startswith("could not start")
             and _w(st, 3)["pid"] is None}
    oom = {**gpu_alerts("oom", "stray_context"),
           "rank 0 failed, its finding naming rank 1": lambda st: _w(st, 0)["state"] == "failed"
           and "rank 1" in _w(st, 0)["memory"]["oom"],
           "the finding completed at its death": lambda st: any(
               a["kind"] == "oom" and a["oom"]["died"] for g in st["gpus"] for a in g["alerts"])}
    return {s.name: s for s in [
        Scenario("gpu2", 2, {"CHILD": "0", "SLEEP": "0.1", "MPWATCH_GPU_GROWTH_WINDOW_S": "8"},
                 ["--gpu-interval", "0.5"], gpu2, lambda: nvml_two_gpus(ghost, outside=6.0, grow=True),
                 lambda: cuda_two_gpus(grow=True)),
        Scenario("gpu8", 8, {"SLEEP": "0.2", "MPWATCH_GPU_IDLE_S": "3"}, ["--gpu-interval", "0.5"], gpu8,
                 nvml_eight_gpus, cuda_eight_gpus),
        # Issue 33: MIG slices as GPUs of their own, and what the driver keeps from a user.
        Scenario("mig", 3, {"SLEEP": "0.1"}, ["--gpu-interval", "0.5"], mig, lambda: nvml_mig(ghost + 200), cuda_mig,
                 libnvml=True),
        Scenario("states", 5, {"CHILD": "0", "STALL": "1", "FAIL": "3", "FAIL_ONCE": "4", "SLEEP": "0.05"},
                 ["--stall-timeout", "2", "--max-restarts", "1", "--grace", "2"], state_ranks, setup=_pause_rank_2),
        # Ranks that ended every other way: exited by itself, killed on request, could not start
        # (rank 3's first attempt removes the folder the workers start in: its restart cannot start).
        Scenario("ended", 4, {"EXIT": "1", "LEAVE_CWD": "3", "SLEEP": "0.05"}, ["--max-restarts", "1", "--grace", "2"],
                 ended, setup=_kill_rank_2, workdir=True, final=True),
        # 256 ranks on one node (a big machine's worth): the table, the header and the counts at scale. Its
        # workers forked from one process that imported what they import (--preload), as a torch script's
        # are: its fresh recording alone kept the machine busy 19 CPU-s with 256 interpreters each importing
        # for itself, 12 forked (in suites 13-24 CPU-s then, 4-13 since).
        Scenario("wide", 256, {"SLEEP": "1.0", "MPWATCH_MAX_WORKERS": "256"},
                 ["--preload", "multiprocessing.connection", "--preload", "subprocess"], wide, details=False),
        # Issue #20: the mnist demo (torch, offline digits), its loss from 2.3 down: the TREND reads falling.
        Scenario("mnist", 2, {}, [], {"both ranks past step 150": lambda st: all(
            w["state"] == "running" and (w["step"] or 0) >= 150 for w in st["workers"])},
                 script=ROOT / "demo" / "mnist.py", args=("--max-steps", "100000")),
        # Issue #20: a container: NVML's pids are the host's, none of them a rank here.
        Scenario("container", 2, {"SLEEP": "0.1"}, ["--gpu-interval", "0.5"], container,
                 lambda: nvml_container(ghost + 100), cuda_container),
        # Issue #20: rank 1 of a 3-rank gloo run (torch) paused, its peers waiting for it. Its steps
        # sleep 0.2 s after opt.step(), so the pause almost always lands there and the peers wait in
        # the loss's all_reduce, which their Python stacks show (paused in backward(), they would wait
        # in DDP's all-reduce, which only a native stack shows: py-spy, which under load may not answer
        # in its 10 s; with 0.02 s a quiet fresh-clone suite failed there once).
        Scenario("paused", 3, {}, ["--stall-timeout", "3"], paused, setup=_pause_rank_1,
                 script=ROOT / "demo" / "hang.py", args=("--steps", "100000", "--step-time", "0.2")),
        # Issue #20: three ranks of one process group (torch.distributed), for the restart dialog.
        Scenario("ddp", 3, {}, [], {"three ranks of one process group past step 20": lambda st: all(
            w["state"] == "running" and w["dist"] and (w["step"] or 0) >= 20 for w in st["workers"])},
                 script=ROOT / "tests" / "fixtures" / "ddp_steps.py", args=("100000",)),
        # Issue #20: rank 1 past its start-up limit (--startup-timeout 3) without a first report.
        Scenario("slow", 2, {"SLOW_RANKS": "1", "SLOW_S": "600", "SLEEP": "0.05", "STEPS": "1000000"},
                 ["--startup-timeout", "3", "--stall-timeout", "2"],
                 {"rank 1 a slow start, in its frame": lambda st: bool((_w(st, 1)["slow_start"] or {}).get("where")),
                  "rank 0 past step 20": lambda st: (_w(st, 0)["step"] or 0) >= 20},
                 script=ROOT / "tests" / "fixtures" / "slow_start.py"),
        # Issue 32: an unmodified 3-rank DDP run (gloo) whose rank 1's forward is 0.2 s slower: the straggler.
        Scenario("straggler", 3, {}, [], stragglers, script=ROOT / "tests" / "fixtures" / "ddp_pace.py",
                 args=("--slow-rank", "1", "--slow-forward", "0.2")),
        # Issue 41: the run slower than its own best: every rank's Dataset 3x slower from its 850th batch on
        # (the run has its best by then: a minute of steps), its ranks held above this machine's noise.
        Scenario("slowdown", 3, {}, [], slowdowns, setup=_hold_ranks,
                 script=ROOT / "tests" / "fixtures" / "ddp_pace.py",
                 args=("--data", "0.06", "--data-slower-after", "850"), ready=360),
        # Issue 33: rank 0 dies of CUDA OOM (tests/fixtures/cuda_oom.py on the scripted torch), GPU 0 crowded
        # by rank 1 (the contention demo's set_device(0)), rank 2's stray context and a process outside the run.
        Scenario("oom", 3, {"OOM_RANKS": "0", "CHUNK_MB": "2048", "SLEEP": "0.1"},
                 ["--gpu-interval", "0.5", "--cuda-memory-history"], oom, nvml_oom, cuda_oom, setup=_oom_rank_0,
                 script=ROOT / "tests" / "fixtures" / "cuda_oom.py", args=("go",), workdir=True),
        # Issue 32: a torch loop with no line of mpwatch's, profiled (ctl profile all, then rank 1 again).
        Scenario("profile", 2, {}, [], PROFILE, setup=_profile_ranks,
                 script=AUTO_LOOP, args=("--steps", "250", "--sleep", "0.1", "--out", "/dev/null")),
        # Issue 31: tunables in force and pending, a checkpoint taken (tests/fixtures/control_loop.py).
        Scenario("control", 2, {}, [], CONTROL, setup=_tune, script=ROOT / "tests" / "fixtures" / "control_loop.py",
                 args=("0", "0.05")),
        # A torch loop with no line of mpwatch's (automatic steps, issue 21), a DataLoader worker each.
        Scenario("auto", 2, {}, [], AUTO,
                 script=AUTO_LOOP, args=("--steps", "100000", "--sleep", "0.05", "--loader-workers", "1",
                                         "--out", "/dev/null")),
    ]}


# ---------------------------------------------------------------- normalising ----
class Normaliser:
    """Rewrites what differs from run to run and machine to machine (see the module's doc)."""

    def __init__(self, scenario: str, run_dir: Path, started: float, run_id: str,
                 more: dict[str, str] | None = None):
        self.started = started
        self.pids: dict[int, int] = {}
        self.next_other = 52000
        user = getpass.getuser()
        host = socket.gethostname()
        roots = [(run_dir, f"/srv/runs/{scenario}"), (run_dir.parent, "/srv/runs"),
                 (ROOT, "/srv/mpwatch"), (Path(sys.prefix), "/srv/mpwatch/.venv"),
                 (Path(sys.base_prefix), "/usr"), (Path(tempfile.gettempdir()), "/tmp")]
        pairs: dict[str, str] = {run_id: f"20260101-000000-{scenario}", f"on {host}": "on gpu-node-1",
                                 f"{user}@{host}": "ana@gpu-node-1", **(more or {})}  # who asked: `ctl ana@...`
        for path, to in roots:
            for form in {str(path), os.path.realpath(path)}:
                pairs.setdefault(form, to)
        self.paths = sorted(pairs.items(), key=lambda kv: -len(kv[0]))  # the longest first
        self.user = user

    def clock(self, hms: str) -> str:
        """A wall-clock time a text names (this machine's local time, the day the run started),
        shifted as the times are, in UTC: what the tests (TZ=UTC) draw from the shifted times."""
        day = time.localtime(self.started)
        h, m, s = (int(x) for x in hms.split(":"))
        ts = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, h, m, s, 0, 0, -1))
        return time.strftime("%H:%M:%S", time.gmtime(round(EPOCH + (ts - self.started))))

    def pid(self, pid: int, to: int | None = None) -> int:
        if pid not in self.pids:
            if to is None:
                to, self.next_other = self.next_other, self.next_other + 1
            self.pids[pid] = to
        return self.pids[pid]

    def assign(self, status: dict[str, Any], events: list[dict[str, Any]]) -> None:
        """The known pids first, so each gets its place whatever order they appear in."""
        self.pid(status["run"]["pid"], 40000)
        for w in status["workers"]:
            base = 41000 + 100 * w["rank"]
            if w["pid"] is not None:
                self.pid(w["pid"], base)
            for i, c in enumerate(w["children"]):
                self.pid(c["pid"], base + 1 + i)
        for e in events:  # earlier attempts of restarted workers
            if e["event"] == "worker_started" and e.get("pid") is not None and e["rank"] is not None:
                self.pid(e["pid"], 41000 + 100 * e["rank"] + 50 + int(e.get("attempt") or 0))

    def collect(self, x: Any, key: str | None = None) -> None:
        """Give every other pid its number before any text that names it is rewritten."""
        if isinstance(x, dict):
            for k, v in x.items():
                self.collect(v, k)
        elif isinstance(x, list):
            for v in x:
                self.collect(v, key)
        elif isinstance(x, int) and not isinstance(x, bool) and key in PID_KEYS:
            self.pid(x)

    def text(self, s: str) -> str:
        for frm, to in self.paths:
            s = s.replace(frm, to)
        s = s.replace(f"({self.user}: ", "(ana: ").replace(f", user {self.user})", ", user ana)")
        s = _CLOCK_IN_TEXT.sub(lambda m: m.group(1) + self.clock(m.group(2)), s)
        return _PID_IN_TEXT.sub(lambda m: m.group(1) + ", ".join(
            str(self.pids.get(int(p), int(p))) for p in m.group(2).split(", ")), s)

    def __call__(self, x: Any, key: str | None = None) -> Any:
        if isinstance(x, dict):
            return {self.text(k): self(v, k) for k, v in x.items()}
        if isinstance(x, list):
            return [self(v, key) for v in x]
        if isinstance(x, str):
            if key == "key":  # an alert's key names its condition, pids included: "outside:0:4242"
                return re.sub(r"\d+", lambda m: str(self.pids.get(int(m.group()), m.group())), x)
            return "ana" if key == "user" and x == self.user else self.text(x)
        if isinstance(x, bool):
            return x
        if isinstance(x, int) and key in PID_KEYS:
            return self.pid(x)
        if isinstance(x, (int, float)) and key in TIME_KEYS:
            return round(EPOCH + (x - self.started), 1)
        return x


# ------------------------------------------------------------------ recording ----
_PREFIX = re.compile(r"^\[mpwatch \d\d:\d\d:\d\d\] ")


def headless_lines(run: HeadlessRun) -> list[str]:
    return [_PREFIX.sub("", ln) for ln in run.stderr_text.splitlines() if _PREFIX.match(ln)]


READY_S = 180.0  # how long a scenario may take to meet its conditions (a busy 2-core box)


def until_met(sc: Scenario, client: Client, timeout: float = READY_S) -> Any:
    """The first status that meets every condition of the scenario; fails naming the ones
    that never held."""
    unmet: list[str] = []

    def met() -> Any:
        st = client.status()
        unmet[:] = sc.unmet(dict(st))
        return None if unmet else st
    # Every 0.2 s, or once a second per 256 ranks: a status of 256 costs the supervisor and this
    # process ~13 ms of CPU, and the workers of `wide` step once a second anyway.
    try:
        return wait_for(met, timeout, interval=max(0.2, sc.n / 256), what=f"scenario {sc.name}'s conditions")
    except AssertionError:
        raise AssertionError(f"scenario {sc.name}: never met within {timeout:g}s: {'; '.join(unmet)}") from None


def record(sc: Scenario, tmp: Path, then: Callable[[HeadlessRun, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The scenario run and recorded; `then(run, status)`, where given, once its conditions hold and
    before the rest is read (a test of the run's behaviour on the same run: one run, not two)."""
    env = dict(os.environ, **sc.env)
    if sc.nvml is not None and sc.libnvml:
        from mpwatch.testing.libnvml import build
        from mpwatch.testing.libnvml.script import env_for, write_script

        env = env_for(build.build(tmp / "libnvml"), write_script(sc.nvml(), tmp / "nvml-script.txt"), env)
    elif sc.nvml is not None:
        path = tmp / "nvml.json"
        path.write_text(json.dumps(sc.nvml()))
        env["MPWATCH_SCRIPTED_NVML"] = str(path)
    if sc.cuda is not None:
        path = tmp / "cuda.json"
        path.write_text(json.dumps(sc.cuda()))
        env["MPWATCH_SCRIPTED_CUDA"] = str(path)
    work = tmp / "work"
    work.mkdir()
    run = HeadlessRun(tmp, sc.script, *sc.args, n=sc.n, opts=sc.opts, env=env, cwd=work if sc.workdir else None)
    try:
        run.start()
        if sc.setup is not None:
            sc.setup(run)
        with Client.at(run.run_dir) as client:
            try:
                status = until_met(sc, client, sc.ready or READY_S)
            except (ClientError, AssertionError) as e:  # what the run did, not only that it stopped
                raise AssertionError(f"scenario {sc.name}: {e}\n{run.where()}") from None
            events = [dict(e) for e in client.events(0)["events"]]
            timeline = None
            if hasattr(client, "gpu_timeline") and status["gpus"]:
                timeline = {str(w): client.gpu_timeline(w) for w in TIMELINE_WINDOWS}
            ranks = [w["rank"] for w in status["workers"]] if sc.details else []
            history = {str(r): [list(p) for p in client.history(r)] for r in ranks}
            logs = {str(r): {s: client.logs(r, s, 12) for s in ("stdout", "stderr")} for r in ranks}
        if then is not None:
            then(run, dict(status))
        from mpwatch.text import eventtext

        want = [t for t in (eventtext.line(e) for e in events) if t]
        if want:  # the supervisor prints each line as it records the event: wait for the last
            wait_for(lambda: want[-1] in headless_lines(run), 30, what="the headless lines")
        lines = headless_lines(run)
        if want:
            lines = lines[:len(lines) - lines[::-1].index(want[-1])]
        dumps = {}
        for w in status["workers"]:
            if w["last_dump"]:
                dumps[w["last_dump"]] = Path(w["last_dump"]).read_text(errors="replace")
        final = None
        if sc.final:
            run.ctl("stop")
            run.wait_exit(60)
            final = json.loads((run.run_dir / "final.json").read_text())
        norm = Normaliser(sc.name, run.run_dir, status["run"]["started"], status["run"]["id"])
        norm.assign(dict(status), events)
        data = {"scenario": sc.name, "recorded_with": f"python -m tests.record {sc.name}",
                "conditions": list(sc.expect), "status": status, "events": events, "lines": lines, "history": history, "logs": logs,
                "dumps": dumps, "timeline": timeline}
        if final is not None:
            data["final"] = final
        norm.collect(data)
        return norm(data)
    finally:
        run.cleanup()


def digest(data: dict[str, Any]) -> str:
    """The recorder's mark on a recording: the sha256 of everything else in it. A file edited by
    hand (a value, a condition added to its list) no longer has it: tests/test_recordings.py fails
    with the command that records it again."""
    body = {k: v for k, v in data.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write(out: Path, data: dict[str, Any]) -> None:
    """The one way a recording is written: with its digest."""
    out.write_text(json.dumps({**data, "digest": digest(data)}, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    every: dict[str, Any] = {**scenarios(unused_pid()), "nodes": None}  # nodes: tests/record_nodes.py
    names = argv or list(every)
    unknown = [n for n in names if n not in every]
    if unknown:
        print(f"record: unknown scenario(s) {', '.join(unknown)}; known: {', '.join(every)}", file=sys.stderr)
        return 2
    DATA.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"mpwatch-record-{name}-") as tmp:
            if name == "nodes":
                from tests.record_nodes import record_nodes

                data = record_nodes(Path(tmp))
            else:
                data = record(every[name], Path(tmp))
        out = DATA / f"{name}.json"
        write(out, data)
        print(f"recorded {out.relative_to(ROOT)} in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
