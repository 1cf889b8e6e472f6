"""Measuring tools shared by the bench modules: medians, alternated runs, headless mpwatch
runs in a scratch directory, and leaving no process behind (the process helpers, waiting
and liveness, are the tests' own: tests/helpers.py).

Nothing here imports torch: the bench process times other processes, and its own start-up
must not weigh on what it measures.
"""
from __future__ import annotations

import contextlib
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mpwatch.rundir import reader
from mpwatch.supervisor.options import machine_cap
from tests.helpers import alive, descendants, kill_all, wait_for

__all__ = ["alive", "descendants", "kill_all", "wait_for"]  # the shared process helpers, for the bench modules

BIN = Path(sys.executable).parent
MPWATCH = str(BIN / "mpwatch") if (BIN / "mpwatch").exists() else None
TORCHRUN = str(BIN / "torchrun") if (BIN / "torchrun").exists() else None


def mpwatch_cmd() -> list[str]:
    """What a user types: the console script, else `python -m mpwatch`."""
    return [MPWATCH] if MPWATCH else [sys.executable, "-m", "mpwatch"]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def alternated(reps: int, names: list[str]):
    """(rep, name) pairs, the order reversed every other repetition so that neither side
    always runs first (a warm page cache, a busy neighbour)."""
    for i in range(reps):
        for name in (names if i % 2 == 0 else list(reversed(names))):
            yield i, name


ROOT = Path(__file__).resolve().parent.parent
BEFORE_ISSUE_13 = "1341998"  # main before the supervisor's redesign (one Run class of ~1100 lines)
BEFORE_ISSUE_43 = "acadc4d"  # main before the supervisor's work at 256 ranks was cut, and before the forkserver


@contextlib.contextmanager
def tree_at(commit: str):
    """This checkout's mpwatch/ and bench/ at `commit`, in a temporary folder (PYTHONPATH=it
    runs that code, the console script included); a string saying why where there is none."""
    with tempfile.TemporaryDirectory(prefix="mpwatch-bench-base-") as tmp:
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "mpwatch", "bench"], capture_output=True)
        if arch.returncode != 0:
            yield f"{commit} is not in this checkout's history"
            return
        subprocess.run(["tar", "-x", "-C", tmp], input=arch.stdout, check=True)
        yield Path(tmp)


def clean_env(**extra) -> dict:
    """This environment without any mpwatch channel (the bench may itself run under mpwatch)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPWATCH_")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def shown(cmd: list[str]) -> str:
    """A command as the table shows it: interpreter and scripts by their short names."""
    out = []
    for part in cmd:
        p = str(part)
        if p == sys.executable:
            p = "python"
        elif p.startswith(str(BIN) + os.sep):
            p = p[len(str(BIN)) + 1:]
        elif os.sep in p and os.path.isabs(p):
            p = os.path.basename(p)
        out.append(p)
    return shlex.join(out)


def whole_run(cmd: list[str], env: dict, timeout: float = 600) -> tuple[float, float]:
    """(CPU-s, wall s) of a command run to its end: its CPU is every process reaped up its tree
    (a supervisor reaps its forkserver, which reaped the workers). Raises where it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                         timeout=timeout)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise RuntimeError(f"{shown(cmd)} exited {res.returncode}: {res.stderr.strip()[-300:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


@contextlib.contextmanager
def scratch(prefix: str):
    with tempfile.TemporaryDirectory(prefix=f"mpwatch-bench-{prefix}-") as d:
        yield Path(d)


def write_script(dir: Path, name: str, text: str) -> Path:
    path = dir / name
    path.write_text(text, encoding="utf-8")
    return path


class Headless:
    """`mpwatch --headless` on a script, with its run directory inside `dir`; a context
    manager that always leaves no process behind."""

    def __init__(self, dir: Path, script: Path, *args, n: int, opts=(), env=None, name="run"):
        self.dir = Path(dir)
        self.run_dir = self.dir / name
        self.cmd = [*mpwatch_cmd(), "--headless", "-n", str(n), "--run-dir", str(self.run_dir), *map(str, opts),
                    str(script), *map(str, args)]
        self.env = dict(env if env is not None else clean_env())
        if n > machine_cap():  # the bound a wide run needs, set here: the bench runs as committed
            self.env["MPWATCH_MAX_WORKERS"] = str(n)
        self.proc: subprocess.Popen | None = None
        self.pids: set[int] = set()
        self._client = None

    def start(self) -> Headless:
        self.log = open(self.dir / f"{self.run_dir.name}.mpwatch.err", "wb")  # noqa: SIM115 - closed in cleanup()
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=self.env,
                                     cwd=self.dir, start_new_session=True)
        return self

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.cleanup()

    def client(self, timeout: float = 60.0):
        if self._client is None:
            from mpwatch.sources.local import Client, ClientError

            wait_for(lambda: (self.run_dir / "control.json").exists() or self.proc.poll() is not None,
                     timeout, what="the supervisor's control file")
            if self.proc.poll() is not None:
                raise RuntimeError(f"mpwatch exited early: {self.stderr_tail()}")
            deadline = time.monotonic() + timeout
            while True:
                try:
                    self._client = Client.at(self.run_dir)
                    break
                except ClientError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        return self._client

    def status(self) -> dict:
        st = self.client().status()
        self.pids.update(w["pid"] for w in st["workers"] if w.get("pid"))
        return st

    def stderr_tail(self, n: int = 5) -> str:
        """The last lines mpwatch printed, and why it stopped if it was told to."""
        try:
            lines = (self.dir / f"{self.run_dir.name}.mpwatch.err").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        why = [ln for ln in lines[:-n] if "stopping the run" in ln][-1:]
        return " / ".join(why + lines[-n:])

    def events(self, kind: str | None = None) -> list[dict]:
        out = []
        for rec in reader.read_events(self.run_dir):
            if rec.get("event") == "worker_started":
                self.pids.add(rec["pid"])
            if kind is None or rec.get("event") == kind:
                out.append(rec)
        return out

    def final(self) -> dict | None:
        try:
            return json.loads((self.run_dir / "final.json").read_text())
        except (OSError, ValueError):
            return None

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def cleanup(self):
        if self._client is not None:
            self._client.close()
            self._client = None
        self.events()
        pids = set(self.pids)
        for pid in list(pids):
            pids.update(descendants(pid))
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        kill_all(p for p in pids if alive(p))
        if hasattr(self, "log"):
            self.log.close()
