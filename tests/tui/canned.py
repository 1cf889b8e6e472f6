"""A canned run for the snapshot tests: fixed PIDs, times and losses, so screenshots are stable.

CannedSource answers like a Client from this data only; it is the data source of the
formatting and snapshot tests, never a stand-in for the supervisor in behaviour tests.
"""
from __future__ import annotations

import copy

from mpwatch.client import ClientError


def _worker(rank, state, step, loss, **kw):
    w = {
        "rank": rank, "pid": 41000 + rank, "state": state, "step": step, "loss": loss,
        "steps_per_s": 12.5, "metrics": {}, "heartbeat_age": 0.3, "heartbeat": "ok",
        "cpu_percent": 97.0, "rss_bytes": 812 * 2**20, "proc_status": "running", "restarts": 0,
        "exit_code": None, "signal": None, "cause": None, "reports": step, "dropped": 0, "bad_frames": 0,
        "phases": {"data": 20.0, "compute": 60.0, "sync": 10.0}, "cuda": None,
        "loss_tail": [2.0 / (1 + i / 4) + (0.05 if i % 3 == 0 else 0) for i in range(32)],
        "world_size": 4, "uptime": 100.0, "stall": None, "last_dump": None, "unkillable": None,
        "children": [],
    }
    w.update(kw)
    return w


def status() -> dict:
    workers = [
        _worker(0, "running", 1200, 0.2143, children=[
            {"pid": 41100, "cpu_percent": 35.0, "rss_bytes": 300 * 2**20, "status": "sleeping",
             "name": "python", "cmd": "python -c from multiprocessing.spawn import spawn_main",
             "ppid": 41000, "reporting": False, "step": None, "loss": None, "heartbeat_age": None},
            {"pid": 41101, "cpu_percent": 33.0, "rss_bytes": 301 * 2**20, "status": "sleeping",
             "name": "python", "cmd": "python -c from multiprocessing.spawn import spawn_main",
             "ppid": 41000, "reporting": False, "step": None, "loss": None, "heartbeat_age": None}]),
        _worker(1, "stalled", 1187, 0.2311, heartbeat_age=73.0, steps_per_s=0.0, cpu_percent=0.0,
                stall={"since": 0, "step": 1187}),
        _worker(2, "paused", 1150, 0.2250, steps_per_s=0.0, cpu_percent=0.0, proc_status="stopped"),
        _worker(3, "failed", 611, 0.9120, pid=41003, restarts=1, exit_code=1, heartbeat_age=None,
                heartbeat="none", cpu_percent=None, rss_bytes=None, steps_per_s=None,
                cause="exit 1: RuntimeError: CUDA error: an illegal memory access was encountered"),
    ]
    return {
        "run": {"id": "20250101-120000-train", "dir": "/tmp/mpwatch-runs/20250101-120000-train",
                "script": "train.py", "args": ["--epochs", "3"], "state": "running", "pid": 40999,
                "started": 0.0, "uptime": 3723.0, "world_size": 4, "nprocs": 4,
                "counts": {"running": 1, "stalled": 1, "paused": 1, "failed": 1}, "restarts": 1,
                "exit_code": None, "options": {}, "refused_connections": 0},
        "workers": workers,
        "gpus": [],
        "gpu_status": None,
        "alerts": [],
        "events_seq": 7,
    }


def history(rank: int) -> list:
    return [(s, 2.0 / (1 + s / 100) + 0.02 * rank) for s in range(0, 1200 - 30 * rank, 20)]


class CannedSource:
    """Answers status/events/history/logs from the canned data; refuses every action."""

    def __init__(self, st: dict | None = None):
        self.st = st or status()

    def status(self, tail=None):
        return copy.deepcopy(self.st)

    def events(self, since=0):
        return {"events": [], "seq": self.st["events_seq"]}

    def history(self, rank):
        return history(rank)

    def logs(self, rank, stream="stderr", lines=50):
        if stream == "stdout":
            return [f"rank {rank} epoch 1 step {s} loss {2.0 / (1 + s / 100):.4f}" for s in range(0, 200, 20)]
        return ["Traceback (most recent call last):", '  File "train.py", line 42, in <module>',
                "RuntimeError: CUDA error: an illegal memory access was encountered"] if rank == 3 else []

    def act(self, cmd, target):
        raise ClientError("canned data: no run to act on")

    def resize(self, n):
        raise ClientError("canned data: no run to resize")

    def stop(self):
        raise ClientError("canned data: no run to stop")
