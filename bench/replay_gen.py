"""Writes a realistic finished run directory for the replay's benchmark: R ranks for S seconds
(64 ranks and an hour by default), through the writers the supervisor itself uses, at its
real rates:

- events.jsonl (rundir.writer.RunStore): run_started, a worker_started per rank, one report
  event a second per rank (supervisor.workers.ledger's REPORT_EVENT_S: the latest step and loss, the metrics,
  n = the report() calls folded in), a DataLoader child of two ranks reporting every 10 s,
  and what a long run has: a rank that fails and is restarted, a stall of one rank with its
  stack dump and the hang alert naming it, GPU alerts, a dump on request, the stop at the end
  (stopping, every exit, run_finished);
- gpu.jsonl (supervisor/gpu_timeline.GpuTimeline): a tick a second of G GPUs (8) and every
  rank's memory, and the marks (processes appearing, the alerts, the failed rank leaving);
- run.json, final.json (a status in the producer's shape: rows copied from the statuses
  recorded from a real run, tests/data/statuses/gpu8.json, with this run's numbers), the
  ranks' logs with the restart marker, the stall's stack dump.

    python -m bench.replay_gen DIR [RANKS] [SECONDS]
"""
from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

from mpwatch.rundir import layout
from mpwatch.rundir.eventlines import report_fields
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor.gpu.timeline import GpuTimeline

T0 = 1_800_000_000.0
GiB = 1 << 30
STEPS_PER_S = 10
TEMPLATE = Path(__file__).resolve().parent.parent / "tests" / "data" / "statuses" / "gpu8.json"
SCRIPT = "/home/user/train.py"
DUMP = """Process {pid}: python train.py (stall)
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/home/user/train.py", line 88 in wait_for_batch
  File "/home/user/train.py", line 120 in train_step
  File "/home/user/train.py", line 140 in <module>
"""


def loss_at(step: int, rank: int) -> float:
    return 2.5 * math.exp(-step / 9000.0) + 0.05 + 0.01 * math.sin(step / 50.0 + rank)


class Gen:
    def __init__(self, d: Path, ranks: int, seconds: int, gpus: int):
        self.d, self.ranks, self.seconds, self.gpus = d, ranks, seconds, gpus
        self.store = RunStore(d, Settings(events_mb=1 << 20))  # a bench of the writer's rate, not of the cap
        self.timeline = GpuTimeline(self.store, 1 << 40)
        self.pid = {r: 50_000 + r for r in range(ranks)}
        self.fail_rank, self.fail_at = 17 % ranks, seconds // 3
        self.stall_rank, self.stall_at, self.stall_s = 5 % ranks, 2 * seconds // 3, 90
        self.offset = {r: 0 for r in range(ranks)}  # steps lost to the restart

    def step(self, r: int, t: int) -> int:
        return max(0, (t - self.offset[r]) * STEPS_PER_S)

    def ev(self, name: str, rank: int | None, t: float, **fields: Any) -> None:
        self.store.event(name, rank, ts=T0 + t, **fields)

    def write(self) -> None:
        self.d.mkdir(parents=True, exist_ok=True)
        self.store.create()
        self.store.write_json(layout.RUN_JSON, {
            "run_id": "bench-replay", "script": SCRIPT, "args": ["--epochs", "90"], "cwd": "/home/user",
            "started": T0, "pid": 40_000, "options": {"nprocs": self.ranks, "max_restarts": 3, "stall_timeout": 60.0,
                                                      "grace": 10.0, "resize_mode": "restart", "gpu_interval": 1.0}})
        self.ev("run_started", None, 0, script=SCRIPT, args=["--epochs", "90"], nprocs=self.ranks,
                run_dir=str(self.d), pid=40_000)
        for r in range(self.ranks):
            self.ev("worker_started", r, 0.01 * r, pid=self.pid[r], world_size=self.ranks, master_port=29500,
                    attempt=0)
            self.logs(r, [f"rank {r} starting"])
        for t in range(1, self.seconds + 1):
            self.second(t)
        self.finish()
        self.store.close()
        self.timeline.close()

    def second(self, t: int) -> None:
        for r in range(self.ranks):
            if self.down(r, t):
                continue
            s = self.step(r, t)
            self.store.report(r, T0 + t + 0.001 * r, report_fields(
                s, loss_at(s, r), {"lr": 0.1 * 0.999 ** (s // 100), "grad_norm": 1.0 + (s % 7) / 10}, STEPS_PER_S, 0))
            if r < 2 and t % 10 == 0:  # a DataLoader child that reports itself
                self.store.report(r, T0 + t + 0.5, report_fields(s, 9.0, {}, 1, 0, child=(60_000 + r, self.pid[r])))
        self.notable(t)
        self.tick(t)

    def down(self, r: int, t: int) -> bool:
        return (r == self.fail_rank and self.fail_at <= t < self.fail_at + 5) or \
            (r == self.stall_rank and self.stall_at <= t < self.stall_at + self.stall_s)

    def notable(self, t: int) -> None:
        if t == 5:
            self.ev("gpu_alert", None, t, kind="idle", gpu=self.gpus - 1, severity="info",
                    message=f"GPU {self.gpus - 1}: 4% utilization while its ranks run", short="idle")
        if t == self.fail_at:
            r = self.fail_rank
            tail = ["Traceback (most recent call last):", '  File "train.py", line 120, in train_step',
                    "RuntimeError: CUDA error: an illegal memory access was encountered"]
            self.ev("worker_exited", r, t, pid=self.pid[r], exit_code=1, signal=None, state="failed",
                    cause=f"exit 1: {tail[-1]}", reason=None, stderr_tail=tail)
            self.logs(r, tail, "stderr")
        if t == self.fail_at + 5:
            r = self.fail_rank
            self.pid[r] += 1000
            self.offset[r] = 5
            self.store.mark_logs(r, f"rank {r} restarted at 00:20:05")
            self.ev("worker_started", r, t, pid=self.pid[r], world_size=self.ranks, master_port=29500, attempt=1)
            self.ev("restarted", r, t, attempt=1, pid=self.pid[r], why="exited with failure")
        if t == self.stall_at + 60:  # the stall timeout (run.json's options)
            self.stall(t)
        if t == self.stall_at + self.stall_s:
            self.ev("recovered", self.stall_rank, t, step=self.step(self.stall_rank, t))
        if t % 900 == 0:
            self.ev("dump", 0, t, path=f"rank-0/stacks/{t}.txt", pid=self.pid[0], pids=[self.pid[0]],
                    reason="request", notes=[], where="train_step (train.py:120)", innermost=None, collective=None,
                    native=False)
            self.dump_file(0, t)

    def stall(self, t: int) -> None:
        r = self.stall_rank
        step = self.step(r, self.stall_at)
        self.ev("stalled", r, t, silent_for=60.0, step=step, pid=self.pid[r], kind="blocked",
                detail="futex_wait_queue", wchan="futex_wait_queue")
        self.ev("dump", r, t + 0.3, path=f"rank-{r}/stacks/{t}.txt", pid=self.pid[r], pids=[self.pid[r]],
                reason="stall", notes=[], where="wait_for_batch (train.py:88)", innermost="wait (threading.py:324)",
                collective=None, native=False)
        self.dump_file(r, t)
        others = [x for x in range(self.ranks) if x != r]
        self.ev("alert", None, t + 1, kind="hang", culprits=[r], waiting=others,
                message=f"likely culprit: rank {r} is at step {step} (in wait_for_batch (train.py:88)); "
                        f"ranks {','.join(map(str, others[:3]))}... wait in all_reduce at step {step + 10}")

    def tick(self, t: int) -> None:
        ranks = [r for r in range(self.ranks) if not (r == self.fail_rank and self.fail_at <= t < self.fail_at + 5)]
        per = max(1, self.ranks // self.gpus)
        gpus = []
        for g in range(self.gpus):
            on = [r for r in ranks if r // per == g]
            used = sum(self.mem(r, t) for r in on) + GiB // 2
            gpus.append({"index": g, "mem_used": used, "mem_total": 80 * GiB, "util_gpu": (90 + t + g) % 100,
                         "outside": 0})
        self.timeline.tick({"ts": T0 + t, "gpus": gpus, "ranks": [
            {"rank": r, "gpu": r // per, "nvml": self.mem(r, t), "allocated": self.mem(r, t) - 2 * GiB,
             "reserved": self.mem(r, t) - GiB // 2} for r in ranks]})
        if t == 1:
            for r in ranks:
                self.timeline.mark({"ts": T0 + t, "gpu": r // per, "kind": "proc_started", "rank": r,
                                    "pid": self.pid[r], "text": f"pid {self.pid[r]} (rank {r}) on GPU {r // per}"})
        if t == self.fail_at:
            r = self.fail_rank
            self.timeline.mark({"ts": T0 + t, "gpu": r // per, "kind": "proc_exited", "rank": r,
                                "pid": self.pid[r], "text": f"pid {self.pid[r]} (rank {r}) left GPU {r // per}"})

    def mem(self, r: int, t: int) -> int:
        return 6 * GiB + (r % 4) * GiB // 4 + min(t, 600) * 4 * (1 << 20)

    def finish(self) -> None:
        end = self.seconds + 1
        self.ev("stopping", None, end, why="signal SIGTERM")
        for r in range(self.ranks):
            self.ev("worker_exited", r, end + 0.2 + 0.001 * r, pid=self.pid[r], exit_code=None, signal="SIGTERM",
                    state="killed", cause="stop by mpwatch (SIGTERM)", reason="stop", stderr_tail=[])
        self.ev("run_finished", None, end + 0.5, exit_code=1, workers={})
        self.store.write_json(layout.FINAL_JSON, self.final(end + 0.5))
        self.store.update_json(layout.RUN_JSON, finished=T0 + end + 0.5, exit_code=1)

    def final(self, t: float) -> dict[str, Any]:
        rec = json.loads(TEMPLATE.read_text())["status"]
        st = copy.deepcopy(rec)
        tpl = rec["workers"]
        workers = []
        for r in range(self.ranks):
            w = copy.deepcopy(tpl[r % len(tpl)])
            s = self.step(r, self.seconds)
            w.update({"rank": r, "pid": self.pid[r], "state": "killed", "step": s, "loss": loss_at(s, r),
                      "steps_per_s": None, "heartbeat_age": None, "restarts": int(r == self.fail_rank),
                      "exit_code": None, "signal": "SIGTERM", "cause": "stop by mpwatch (SIGTERM)",
                      "world_size": self.ranks, "stall": None, "children": [], "gpu": None, "cpu_percent": None,
                      "rss_bytes": None, "proc_status": None, "uptime": None, "last_dump": None})
            workers.append(w)
        st["workers"] = workers
        st["gpus"] = st["gpus"][: self.gpus]
        st["run"].update({"id": "bench-replay", "dir": str(self.d), "script": SCRIPT, "args": ["--epochs", "90"],
                          "state": "finished", "pid": 40_000, "started": T0, "uptime": t, "world_size": self.ranks,
                          "nprocs": self.ranks, "counts": {"killed": self.ranks}, "restarts": 1, "exit_code": 1})
        return st

    def logs(self, r: int, lines: list[str], stream: str = "stdout") -> None:
        self.store.rank_paths(r)
        with self.store.open_log(r, stream) as f:
            f.write(("\n".join(lines) + "\n").encode())

    def dump_file(self, r: int, t: int) -> None:
        d = layout.rank_paths(self.d, r).stacks
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{t}.txt").write_text(DUMP.format(pid=self.pid[r]))


def generate(d: Path, ranks: int = 64, seconds: int = 3600, gpus: int = 8) -> Path:
    Gen(Path(d), ranks, seconds, gpus).write()
    return Path(d)


if __name__ == "__main__":
    args = sys.argv[1:]
    out = generate(Path(args[0]), *(int(a) for a in args[1:3]))
    print(out)
