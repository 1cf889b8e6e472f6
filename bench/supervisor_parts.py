"""The supervisor's own work at N ranks, in one process, by CPU time (not wall clock: the
machine is shared): what a report frame costs between the socket's bytes and the worker's row
(decode, checks, the ledger, the report event), what a tick of the serve loop costs with N
workers running (the exit path, stalls, the ledger's held reports, the live room's pushes...), and
what a status costs. The run is real (supervisor.core's Run, its rooms, its files), its
workers stand-ins (a process that never ends; their frames are what a worker's sender sends).

    python bench/supervisor_parts.py N  -> one JSON line {frame_us, tick_us, status_ms}

Run as a file so that PYTHONPATH picks the mpwatch under test (bench_scale runs it against
the tree before issue 43 too); imports nothing of bench/.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TUI_TAIL = 12  # loss points a TUI's status asks for (tui.poller.TAIL_POINTS)


class Peer:
    def __init__(self, rank: int, pid: int):
        self.rank, self.pid, self.version = rank, pid, 3

    def send(self, payload: bytes) -> bool:
        return True

    def push(self) -> None:
        pass


def frames(rank: int, k: int, t0: float) -> list[bytes]:
    """k batches of a worker reporting 100 times a second, flushed every 2 s (8 folded entries)."""
    from mpwatch.contract import protocol

    out = []
    for i in range(k):
        step0 = i * 200
        reports = [[t0 + i * 2 + j * 0.25, step0 + (j + 1) * 25 - 1, 1.0 / (step0 + j + 1), {}, 25]
                   for j in range(8)]
        out.append(protocol.encode({"t": protocol.BATCH, "reports": reports, "dropped": 0,
                                    "phases": {"compute": 0.01 * i}}))
    return out


def build(n: int, tmp: Path, procs: list):
    # (read from its module by name: the tree before issue 43 has no contract face to ask)
    State = importlib.import_module("mpwatch.contract.names").State
    from mpwatch.settings import Settings
    from mpwatch.supervisor.core import Options, Run
    from mpwatch.supervisor.workers.worker import Attempt

    os.environ["XDG_RUNTIME_DIR"] = str(tmp)
    opts = Options(script="train.py", args=[], nprocs=n, run_dir=str(tmp / "run"), cwd=str(tmp))
    run = Run(opts, Settings.from_env({}))
    run.store.create(run.claim.fd if run.claim is not None else None, None)
    for rank in range(n):
        run._begin(rank, Attempt(procs[rank], n), State.STARTING, "first start", pid=None)
        if hasattr(run.reaper, "watch"):  # as Run.start does (since issue 43)
            run.reaper.watch(procs[rank])
        peer = Peer(rank, procs[rank].pid)
        run.ledger.on_hello(peer, {"t": "hello", "rank": rank, "pid": peer.pid, "v": 3})
    return run


def main(n: int) -> dict:

    # the workers' processes: real ones (the exit path and the sampler read them), that only sleep
    procs = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(n)]
    try:
        with tempfile.TemporaryDirectory(prefix="mpwatch-parts-") as d:
            return measure(build(n, Path(d), procs), n, procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def measure(run, n: int, procs: list) -> dict:
    from mpwatch.contract import protocol

    if True:
        k = 20
        t0 = time.time()
        per = {r: frames(r, k, t0) for r in range(n)}
        peers = {r: Peer(r, procs[r].pid) for r in range(n)}
        c = time.thread_time()
        workers = [run.workers[r] for r in range(n)]
        for i in range(k):
            for r in range(n):
                workers[r].reports.next_event = 0.0  # 2 s since its last frame: each frame is an event
                run.ledger.on_frame(peers[r], protocol.decode(per[r][i]))
            run.ledger.flush(time.monotonic())
        frame_us = (time.thread_time() - c) / (k * n) * 1e6
        ticks = 50
        c = time.thread_time()
        for _ in range(ticks):
            tick(run)
        tick_us = (time.thread_time() - c) / ticks * 1e6
        run.sampler.sample()
        c = time.thread_time()
        for _ in range(5):
            run.sampler.sample()
        sample_ms = (time.thread_time() - c) / 5 * 1e3  # (the scan's age is under TREE_S: none of them scans)
        c = time.thread_time()
        for _ in range(5):
            run.sampler._probe._scan_tree()
        scan_ms = (time.thread_time() - c) / 5 * 1e3
        c = time.thread_time()
        for _ in range(10):
            protocol.encode(run.snapshot(TUI_TAIL))  # what the control socket answers the TUI's poll
        status_ms = (time.thread_time() - c) / 10 * 1e3
        run.close()
    return {"frame_us": frame_us, "tick_us": tick_us, "sample_ms": sample_ms, "scan_ms": scan_ms,
            "status_ms": status_ms}


def tick(run) -> None:
    """The serve loop's turn (supervisor.core's serve), less its wait for a command."""
    run._handle_signals()
    if hasattr(run, "launcher"):  # (the rooms the tree before issue 43 lacks, or named otherwise)
        run.launcher.tick()
    now = time.monotonic()
    run.ledger.flush(now)
    (run.live if hasattr(run, "live") else run.control).push()
    run.reaper.poll()
    run.stalls.check(now)
    run.stragglers.check(now)
    if hasattr(run, "slowdowns"):
        run.slowdowns.check(now)
    run.resizing.advance()
    run._check_finished()


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 256)))
