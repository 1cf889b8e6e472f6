"""A TUI fed synthetic status snapshots: N workers whose step, loss and heartbeat change on
every poll, as when each reports 100 times a second. For measuring the TUI's own cost at a
scale this 2-core machine cannot run for real (256 real workers starve the very processes
being measured). Runs the real app in a real terminal:

    python -m bench.synthetic 256 [POLLS_FILE]

POLLS_FILE, when given, holds the number of snapshots served so far, so the bench can say
how often the TUI actually refreshed.
"""
from __future__ import annotations

import sys
import time

RATE = 100.0


class SyntheticSource:
    """Status snapshots of n workers whose steps, losses and heartbeats change on every
    poll, as they do when every worker reports 100 times a second; answers the control
    requests a key sends. For measuring the TUI's own cost at a scale this machine cannot
    run for real; its rows say so."""

    def __init__(self, n: int, polls_file: str | None = None):
        self.n, self.t0, self.paused = n, time.monotonic(), set()
        self.polls, self.polls_file = 0, polls_file

    def status(self, tail: int = 32) -> dict:
        t = time.monotonic() - self.t0
        self.polls += 1
        if self.polls_file:
            with open(self.polls_file, "w") as f:
                f.write(str(self.polls))
        workers = []
        for r in range(self.n):
            step = int(t * RATE) + r
            workers.append({
                "rank": r, "pid": 100000 + r, "state": "paused" if r in self.paused else "running",
                "step": step, "loss": 1.0 / (step + 1), "steps_per_s": RATE - (r % 7), "metrics": {},
                "heartbeat_age": round((t * 7 + r) % 0.05, 3), "heartbeat": "ok", "cpu_percent": 50.0 + r % 40,
                "rss_bytes": (200 + r) * 2**20, "restarts": 0, "exit_code": None, "signal": None, "cause": None,
                "reports": step, "dropped": 0, "phases": {"data": t * 0.2, "compute": t * 0.7},
                "uptime": t, "loss_tail": [1.0 / (step + 40 - i) for i in range(tail)],
                "stall": None, "last_dump": None, "unkillable": None, "children": []})
        return {"run": {"id": "synthetic", "script": "train.py", "args": [], "state": "running",
                        "uptime": t, "counts": {"running": self.n - len(self.paused), "paused": len(self.paused)},
                        "restarts": 0, "exit_code": None},
                "workers": workers, "gpus": [], "gpu_status": "no NVIDIA GPU found", "alerts": [],
                "events_seq": 0}

    def events(self, since=0):
        return {"events": [], "seq": 0}

    def act(self, cmd, target):
        (self.paused.add if cmd == "pause" else self.paused.discard)(target)
        return f"{cmd}d rank {target}"


def main(argv: list[str]) -> int:
    from mpwatch.tui.app import MpwatchApp

    n = int(argv[0]) if argv else 256
    MpwatchApp(SyntheticSource(n, argv[1] if len(argv) > 1 else None)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
