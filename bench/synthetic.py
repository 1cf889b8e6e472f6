"""A TUI fed synthetic status snapshots: N workers whose step, loss and heartbeat change on
every poll, as when each reports 100 times a second; optionally G GPUs whose memory and
utilization move and whose history (the main screen's sparklines) grows a point a second.
For measuring the TUI's own cost at a scale this 2-core machine cannot run for real (256
real workers starve the very processes being measured). Runs the real app in a real terminal:

    python -m bench.synthetic 256 [POLLS_FILE] [--gpus 8] [--nodes 4]

POLLS_FILE, when given, holds the number of snapshots served so far, so the bench can say
how often the TUI actually refreshed. The statuses keep the producer's shape: workers and
GPUs are copies of those recorded from a real 8-GPU run (tests/data/statuses/gpu8.json),
with the moving numbers changed. With --nodes K, the workers (and GPUs) are split over K
synthetic nodes merged by the real MergedSource (sources.multinode.source: a thread per node, the
merge, the cross-node straggler analysis), as `mpwatch attach` merges the nodes of a run.
"""
from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

RATE = 100.0
HISTORY = 120  # points of a GPU's history (status.HISTORY_POINTS): two minutes
TEMPLATE = Path(__file__).resolve().parent.parent / "tests" / "data" / "statuses" / "gpu8.json"


class SyntheticSource:
    """Status snapshots of n workers whose steps, losses and heartbeats change on every
    poll, as they do when every worker reports 100 times a second; answers the control
    requests a key sends. For measuring the TUI's own cost at a scale this machine cannot
    run for real; its rows say so."""

    def __init__(self, n: int, polls_file: str | None = None, gpus: int = 0):
        self.n, self.t0, self.paused = n, time.monotonic(), set()
        self.polls, self.polls_file = 0, polls_file
        self.n_gpus = gpus
        rec = json.loads(TEMPLATE.read_text())["status"]
        self.worker_tpl = rec["workers"]
        self.gpu_tpl = rec["gpus"]
        self.history: list[dict[str, list[Any]]] = []
        for i in range(gpus):
            g = self.gpu_tpl[i % len(self.gpu_tpl)]
            self.history.append({"mem_used": [g["mem_used"]] * HISTORY, "util_gpu": [g["util_gpu"]] * HISTORY})
        self.history_s = 0

    def _gpus(self, t: float) -> list[dict[str, Any]]:
        second = int(t)
        grow = second > self.history_s
        self.history_s = second
        out = []
        for i in range(self.n_gpus):
            g = copy.deepcopy(self.gpu_tpl[i % len(self.gpu_tpl)])
            g["index"] = i
            g["mem_used"] = int(g["mem_used"] * (0.9 + 0.1 * ((second + i) % 10) / 10))
            g["util_gpu"] = (g["util_gpu"] + second + i) % 100
            h = self.history[i]
            if grow:  # one point a second, as the GPU poller's
                for key in ("mem_used", "util_gpu"):
                    h[key] = h[key][1:] + [g[key]]
            g["history"] = {"mem_used": list(h["mem_used"]), "util_gpu": list(h["util_gpu"])}
            g["ts"] = time.time()
            out.append(g)
        return out

    def status(self, tail: int | None = 32) -> dict[str, Any]:
        tail = 32 if tail is None else tail
        t = time.monotonic() - self.t0
        self.polls += 1
        if self.polls_file:
            with open(self.polls_file, "w") as f:
                f.write(str(self.polls))
        workers = []
        for r in range(self.n):
            step = int(t * RATE) + r
            w = dict(self.worker_tpl[r % len(self.worker_tpl)])
            gpu = None
            if self.n_gpus:
                gpu = dict(w["gpu"], index=r % self.n_gpus, mem_bytes=(20 + (step // 100) % 20) * 2**30)
            w.update({
                "rank": r, "pid": 100000 + r, "state": "paused" if r in self.paused else "running",
                "step": step, "loss": 1.0 / (step + 1), "steps_per_s": RATE - (r % 7), "metrics": {},
                "heartbeat_age": round((t * 7 + r) % 0.05, 3), "heartbeat": "ok", "cpu_percent": 50.0 + r % 40,
                "rss_bytes": (200 + r) * 2**20, "restarts": 0, "exit_code": None, "signal": None, "cause": None,
                "reports": step, "dropped": 0, "phases": {"data": t * 0.2, "compute": t * 0.7},
                "uptime": t, "loss_tail": [1.0 / (step + 40 - i) for i in range(tail)], "world_size": self.n,
                "stall": None, "last_dump": None, "unkillable": None, "children": [], "gpu": gpu})
            workers.append(w)
        paused = len(self.paused)
        return {"run": {"id": "synthetic", "dir": "/tmp/synthetic", "script": "train.py", "args": [],
                        "state": "running", "pid": 1, "started": time.time() - t, "uptime": t,
                        "world_size": self.n, "nprocs": self.n,
                        "counts": {"running": self.n - paused, "paused": paused}, "restarts": 0, "exit_code": None,
                        "options": {"max_restarts": 0, "stall_timeout": 60.0, "grace": 10.0,
                                    "resize_mode": "restart"}, "refused_connections": 0},
                "workers": workers, "gpus": self._gpus(t),
                "gpu_status": None if self.n_gpus else "no NVIDIA GPU found", "alerts": [],
                "events_seq": 0, "straggler": None}

    def events(self, since: int = 0) -> dict[str, Any]:
        return {"events": [], "seq": 0}

    def history(self, rank: int) -> list[tuple[float, float]]:
        return []

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list[str]:
        return []

    def gpu_timeline(self, window: float) -> dict[str, Any]:
        return {"ticks": [], "marks": []}

    def act(self, cmd: str, target: int | str) -> str:
        (self.paused.add if cmd == "pause" else self.paused.discard)(target)
        return f"{cmd}d rank {target}"

    def another(self) -> SyntheticSource:
        return self

    def ended(self, stop: Any = None) -> tuple[None, None]:
        return None, None  # a synthetic run never ends

    def close(self) -> None:
        pass


def merged(n: int, nodes: int, polls_file: str | None, gpus: int) -> Any:
    """A MergedSource over `nodes` synthetic nodes of n / nodes workers each; the first counts
    the polls (every node is polled once per merged poll)."""
    from mpwatch.sources.multinode.source import MergedSource
    from mpwatch.sources.remote.client import Transport

    source = MergedSource(Transport())  # synthetic nodes: no ssh
    for k in range(nodes):
        node = SyntheticSource(n // nodes, polls_file if k == 0 else None, gpus // nodes)
        source.add(f"node-{k}", "synthetic", node, node=k)  # a duck-typed link: what Requests answers
    return source


def main(argv: list[str]) -> int:
    from mpwatch.settings import Settings
    from mpwatch.tui.app import MpwatchApp
    from mpwatch.tui.render import glyphs

    gpus = 0
    if "--gpus" in argv:
        i = argv.index("--gpus")
        gpus = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    nodes = 0
    if "--nodes" in argv:
        i = argv.index("--nodes")
        nodes = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    n = int(argv[0]) if argv else 256
    polls = argv[1] if len(argv) > 1 else None
    source = merged(n, nodes, polls, gpus) if nodes else SyntheticSource(n, polls, gpus)
    MpwatchApp(source, glyphs=glyphs.pick(ascii_only=Settings.from_env().ascii)).run()  # as the CLI does
    if nodes:
        source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
