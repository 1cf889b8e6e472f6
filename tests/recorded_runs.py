"""Runs recorded once per session, shared by the post-mortem commands' tests (tests/cli) and the
replay's (tests/replay): real headless runs that ended the ways a user finds them ended. Their
fixtures are imported by tests/conftest.py, so each run is recorded once per session."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from mpwatch.rundir.reader import read_events
from mpwatch.rundir.textfiles import read_jsonl
from tests.faults.conftest import FAULTS
from tests.helpers import (
    FIXTURES,
    ROOT,
    HeadlessRun,
    WaitTimeout,
    assert_gone,
    internal_errors,
    need,
    wait_for,
)

GiB = 1 << 30


class Recorded:
    """A run directory left by a real run, the folder that holds it, and what the run said
    live before it ended (`seen`: whatever its `until` returned, e.g. a status over the socket)."""

    def __init__(self, run_dir: Path, folder: Path, seen: object = None):
        self.dir = run_dir
        self.folder = folder
        self.seen = seen
        self.run_id = json.loads((run_dir / "run.json").read_text())["run_id"]

    def events(self, kind: str | None = None) -> list[dict]:
        """The run's events as written, only `kind` when given."""
        return list(read_events(self.dir, None if kind is None else {kind}))

    def copy(self, to: Path, name: str = "run") -> Path:
        """A copy to cut short or move (the recording itself stays whole)."""
        dest = Path(to) / name
        shutil.copytree(self.dir, dest, symlinks=True)
        return dest


@pytest.fixture(scope="session")
def record(tmp_path_factory):
    """record(name, script, *args, n, opts, env, until) -> Recorded: start a headless run,
    let `until(run)` drive it to its end (what it returns is the recording's `seen`), clean up
    whatever is left."""
    runs: list[HeadlessRun] = []

    def make(name, script, *args, n=2, opts=(), env=None, until=None) -> Recorded:
        run = HeadlessRun(tmp_path_factory.mktemp(name), script, *args, n=n, opts=opts, env=env)
        runs.append(run)
        run.start()
        seen = until(run) if until is not None else None
        assert run.proc.poll() is not None, "a recorded run must have ended"
        bugs = internal_errors(run.tmp)  # the autouse check sees only a test's own tmp_path
        assert not bugs, f"the recorded run's supervisor had a bug: {bugs}"
        return Recorded(run.run_dir, run.tmp, seen)

    yield make
    for run in runs:
        run.cleanup()


@pytest.fixture(scope="session")
def crashed(record) -> Recorded:
    """Two ranks that raise ZeroDivisionError, each restarted once, then the run fails."""
    return record("crashed", FIXTURES / "crash.py", n=2, opts=["--max-restarts", "1"],
                  until=lambda run: run.wait_exit(120))


@pytest.fixture(scope="session")
def killed(record) -> Recorded:
    """A supervisor SIGKILLed mid-run: no final.json, run.json never says finished."""
    def kill(run):
        wait_for(lambda: len({e["rank"] for e in run.events("report") if e["step"] >= 3}) == 2, 60,
                 what="both ranks past step 3")
        pids = run.all_pids()
        os.kill(run.proc.pid, signal.SIGKILL)
        run.wait_exit(30)
        assert_gone(pids)
    return record("killed", FAULTS / "steady.py", n=2, until=kill)


@pytest.fixture(scope="session")
def hung(record) -> Recorded:
    """demo/hang.py: rank 1 stops before its all_reduce at step 5; ranks 0 and 2 wait in it.
    Stopped (ctl stop) once mpwatch has named the culprit with its frame and every rank's
    stall dump is in (they land in any order, and a busy box makes them late). `seen`: the
    live status just before the stop (tests/supervisor/test_hang_run.py reads it)."""
    need("torch", "demo/hang.py needs torch (pip install -e '.[demo]')")

    def until(run):
        run.wait_event("alert", lambda r: r.get("kind") == "hang" and "in all_reduce" in r["message"]
                       and "(in " in r["message"], 240)  # the peers' collective and the culprit's frame
        wait_for(lambda: {d["rank"] for d in run.events("dump") if d["reason"] == "stall"} == {0, 1, 2}, 120,
                 what="every rank's stall dump")
        seen = finding_in_status(run)
        run.ctl("stop")
        run.wait_exit(60)
        return seen
    return record("hung", ROOT / "demo" / "hang.py", "--hang-rank", "1", "--hang-step", "5", "--step-time", "0.02",
                  n=3, opts=["--stall-timeout", "6"], until=until)  # a busy box once slowed a step past 3 s


def finding_in_status(run: HeadlessRun, timeout: float = 30.0) -> dict:
    """The live status once its own analysis says what the last hang alert says (the tick
    after a dump makes it); past `timeout`, the status as it is, for the test to judge."""
    def agrees() -> dict | None:
        st = run.status()
        hangs = [a["message"] for a in st["alerts"] if a["kind"] == "hang"]
        return st if st["straggler"] and hangs == [st["straggler"]["text"]] else None
    try:
        return wait_for(agrees, timeout, what="the finding in the status")
    except WaitTimeout:
        return run.status()


STORED = ROOT / "tests" / "replay" / "data"


@pytest.fixture(scope="session")
def stored_hang(tmp_path_factory) -> Recorded:
    """A copy of the stored hang recording (tests/replay/data/hang: demo/hang.py as `hung`
    runs it, recorded by tests/replay/record_runs.py): the same files every run, for the
    post-mortem commands' tests."""
    folder = tmp_path_factory.mktemp("stored-hang")
    shutil.copytree(STORED / "hang", folder / "run")
    return Recorded(folder / "run", folder)


@pytest.fixture(scope="session")
def oom(record, tmp_path_factory) -> Recorded:
    """Rank 0 dies of CUDA OOM (tests/fixtures/cuda_oom.py, a scripted NVML and torch: see oom_env),
    with --cuda-memory-history: its snapshot at the OOM is in rank-0/memory/."""
    env, go = oom_env(tmp_path_factory.mktemp("oom-scenarios"))

    def until(run):
        oom_run_until(run, go)
    return record("oom", FIXTURES / "cuda_oom.py", go, n=2, opts=OOM_OPTS, env=env, until=until)


OOM_OPTS = ["--gpu-interval", "0.1", "--cuda-memory-history"]


def oom_env(folder: Path) -> tuple[dict[str, str], Path]:
    """(the workers' environment, the file that sets rank 0 off) of the recorded OOM: on a 10 GiB
    GPU rank 0 holds 6 GiB (5.5 allocated by torch, 0.1 more reserved), rank 1 1 GiB; rank 0 asks
    for 2 GiB more with 1.25 GiB free and dies of it."""
    nvml, cuda = folder / "nvml.json", folder / "cuda.json"
    nvml.write_text(json.dumps({"gpus": [{"mem_total": 10 * GiB}], "frames": [{"gpus": [
        {"processes": [{"pid": "rank:0", "mem": 6 * GiB}, {"pid": "rank:1", "mem": GiB}]}]}]}))
    cuda.write_text(json.dumps({"ranks": {
        "0": [{"at": 0, "device": 0, "allocated": int(5.5 * GiB), "reserved": int(5.6 * GiB),
               "max_allocated": int(5.5 * GiB), "total": 10 * GiB, "free": int(1.25 * GiB)}],
        "1": [{"at": 0, "device": 0, "allocated": int(0.7 * GiB), "reserved": int(0.8 * GiB),
               "max_allocated": int(0.7 * GiB)}]}}))
    env = dict(os.environ, MPWATCH_SCRIPTED_NVML=str(nvml), MPWATCH_SCRIPTED_CUDA=str(cuda), OOM_RANKS="0",
               CHUNK_MB="2048")
    return env, folder / "go"


def oom_run_until(run: HeadlessRun, go: Path) -> None:
    """Let rank 0 die of OOM once both ranks are on the GPU and in the GPU timeline's ticks,
    then, once its finding says it died of it, stop the run."""
    wait_for(lambda: run.worker(0)["gpu"] and run.worker(1)["gpu"], 60, what="ranks 0 and 1 seen on GPU 0")
    wait_for(lambda: ranks_ticked(run.run_dir / "gpu.jsonl") >= {0, 1}, 60, what="gpu.jsonl ticks with ranks 0 and 1")
    go.write_text("")
    run.wait_event("gpu_alert", lambda e: e["kind"] == "oom" and e["oom"]["died"], timeout=60)
    run.ctl("stop")
    run.wait_exit(60)


def ranks_ticked(path: Path) -> set[int]:
    """Ranks seen in the ticks of a gpu.jsonl so far."""
    out: set[int] = set()
    for rec in read_jsonl(path):
        out.update(r["rank"] for r in rec.get("ranks", []) if r.get("nvml"))
    return out
