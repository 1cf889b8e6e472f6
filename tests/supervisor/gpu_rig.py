"""A GPU watcher on a scripted NVML, with real processes standing for the ranks: the views
the alert tests use are built by the watcher's own code (GpuWatch.tick), never by hand.

Each rank is a real sleeping process started with MPWATCH_RANK=N (so the scenario's
"rank:N" names resolve to it, and psutil's lookups are real); with `child=True` it starts
a sleeping child of its own ("rank:N/child"). The scenario's clock and the watcher's are
one fake clock that the test moves. With `lib` (the `libnvml` fixture's folder) the scenario
is played by the stand-in libnvidia-ml.so.1 under the real backend and nvidia-ml-py instead
(MIG and clocks as the scripted one plays them: tests/probes/test_scripted_parity.py), on its
own clock.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from mpwatch.contract import CudaView
from mpwatch.probes.gpu import open_backend
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor.gpu.alerts import AlertConfig
from mpwatch.supervisor.gpu.ranks import RankInfo
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.testing.nvml import ScriptedNvml
from tests.helpers import wait_for
from tests.libnvml import loaded

GiB = 1 << 30
MiB = 1 << 20
SLEEPER = "import time; time.sleep(600)"
PARENT = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
          "time.sleep(600)")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Rig:
    def __init__(self, tmp_path: Path, scenario: dict, ranks: int = 2, child: bool = False,
                 cfg: AlertConfig | None = None, env: dict | None = None, timeline: bool = False,
                 lib: Path | None = None, monkeypatch=None):
        self.clock = Clock()
        argv = [sys.executable, "-c", PARENT if child else SLEEPER]
        self.procs = [subprocess.Popen(argv, env=dict(os.environ, MPWATCH_RANK=str(r)), start_new_session=True)
                      for r in range(ranks)]
        # A process between its fork and its exec is still pytest to psutil (its command): the
        # watcher labels what it first sees, so the ranks (and their children) are theirs first.
        wait_for(lambda: all(_command(p.pid) == argv for p in self.procs), what="the ranks' exec")
        if child:
            wait_for(lambda: all((kids := _children(p.pid)) and _command(kids[0]) == [sys.executable, "-c", SLEEPER]
                                 for p in self.procs), what="the ranks' children, exec'd")
        self.cuda: dict[int, CudaView | None] = {r: None for r in range(ranks)}
        self.running = set(range(ranks))
        self.alive = set(range(ranks))
        self.events: list[tuple[int | None, dict]] = []
        self.stack = contextlib.ExitStack()
        if lib is not None:
            self.stack.enter_context(loaded(lib, monkeypatch, tmp_path, self._own_pids(scenario)))
            backend, why = open_backend(None)
            assert backend is not None, why
        else:
            path = tmp_path / "nvml.json"
            path.write_text(json.dumps(self._own_pids(scenario)))
            backend = ScriptedNvml(str(path), clock=self.clock)
            backend.init()
        settings = Settings(gpu=cfg or AlertConfig())
        self.watch = GpuWatch(1.0, self.infos, lambda rank, **f: self.events.append((rank, f)), env=env or {},
                              settings=settings, opener=lambda env: (backend, None),
                              timeline=RunStore(tmp_path, settings) if timeline else None, clock=self.clock)
        assert self.watch.open(), self.watch.status

    def infos(self) -> list[RankInfo]:
        return [RankInfo(r, p.pid, r in self.running, r in self.alive, [], self.cuda[r])
                for r, p in enumerate(self.procs)]

    def _own_pids(self, x: object) -> object:
        """The scenario with "rank:N" (and "rank:N/child") as this rig's own pids: the scripted
        NVML would look for them among all of pytest's children by MPWATCH_RANK, where another
        test's process still ending may answer first."""
        if isinstance(x, dict):
            return {k: self._own_pids(v) for k, v in x.items()}
        if isinstance(x, list):
            return [self._own_pids(v) for v in x]
        if isinstance(x, str) and x.startswith("rank:"):
            rank, _, sub = x[5:].partition("/")
            if rank.isdigit() and int(rank) < len(self.procs):
                return self.child(int(rank)) if sub == "child" else self.pid(int(rank))
        return x

    def pid(self, rank: int) -> int:
        return self.procs[rank].pid

    def child(self, rank: int) -> int:
        return _children(self.pid(rank))[0]

    def tick(self, dt: float = 1.0, n: int = 1) -> None:
        for _ in range(n):
            self.clock.t += dt
            self.watch.tick()

    def gpus(self) -> list[dict]:
        return self.watch.snapshot()["gpus"]

    def gpu(self, index: int) -> dict:
        return next(g for g in self.gpus() if g["index"] == index)

    def alerts(self, kind: str | None = None) -> list[dict]:
        return [a for g in self.gpus() for a in g["alerts"] if kind is None or a["kind"] == kind]

    def emitted(self, kind: str) -> list[dict]:
        return [f for _, f in self.events if f["kind"] == kind]

    def close(self) -> None:
        self.watch.close()
        self.stack.close()
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def rigs(tmp_path, **fixed):
    """A fixture's body: `make(...)` builds a Rig (with `fixed` arguments), each closed at the test's end."""
    made: list[Rig] = []

    def make(*a, **k):
        r = Rig(tmp_path, *a, **fixed, **k)
        made.append(r)
        return r
    try:
        yield make
    finally:
        for r in made:
            r.close()


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def _command(pid: int) -> list[str] | None:
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return None


def cuda(uuid: str | None, allocated: int, reserved: int, device: int = 0, **extra: int) -> CudaView:
    """A rank's CUDA view as the worker sends it (the worker's own shape, see worker.cuda.TorchCuda)."""
    return {"device": device, "allocated": allocated, "reserved": reserved, "max_allocated": allocated,
            "uuid": uuid, "alloc_retries": extra.get("alloc_retries", 0), "num_ooms": extra.get("num_ooms", 0),
            "inactive_split": extra.get("inactive_split", 0)}

