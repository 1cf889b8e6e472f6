"""Records the run directories tests/cli/data/ holds, with a real supervisor:

    PYTHONPATH=$PWD .venv/bin/python -m tests.cli.record_runs

oom-gpu/: tests/fixtures/cuda_oom.py on a scripted NVML and torch (rank 0 holds 6 GiB, rank 1 1 GiB
of 10 GiB: tests.recorded_runs.oom_env), with --cuda-memory-history; rank 0 dies of CUDA OOM (its
finding, its snapshot at the OOM), then the run is stopped. Its gpu.jsonl is the GPU timeline
that supervisor wrote; tests/cli/test_summary.py reads it for the per-rank GPU peaks (the
same test on a live run runs too, once the supervisor under test writes gpu.jsonl itself).
thinned-gpu/: tests/fixtures/reporter.py on a scripted NVML with the GPU timeline capped at
4 KiB (MPWATCH_GPU_TIMELINE_MB), run until the supervisor has thinned gpu.jsonl, then stopped.
The checkout's and the run directory's paths are replaced by fixed ones (the replay's snapshot
of the OOM draws oom-gpu/); pids are those of the recording machine.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from tests.helpers import FIXTURES, HeadlessRun, keep_run_dir, wait_for
from tests.recorded_runs import OOM_OPTS, oom_env, oom_run_until
from tests.replay.record_runs import normalise

DATA = Path(__file__).resolve().parent / "data"
GiB = 1 << 30


def record_oom(dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mpwatch-record-") as tmp:
        env, go = oom_env(Path(tmp))
        run = HeadlessRun(Path(tmp), FIXTURES / "cuda_oom.py", go, n=2, opts=OOM_OPTS, env=env)
        try:
            run.start()
            oom_run_until(run, go)
        finally:
            run.cleanup()
        keep_run_dir(run.run_dir, dest)
        normalise(dest, run.run_dir, f"/home/user/mpwatch-runs/{dest.name}")


def record_thinned(dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mpwatch-record-") as tmp:
        scenario = Path(tmp) / "scenario.json"
        scenario.write_text(json.dumps({"gpus": [{"mem_total": 10 * GiB}], "frames": [{"gpus": [
            {"processes": [{"pid": "rank:0", "mem": 2 * GiB}, {"pid": "rank:1", "mem": GiB}]}]}]}))
        run = HeadlessRun(Path(tmp), FIXTURES / "reporter.py", "100000", n=2, opts=["--gpu-interval", "0.1"],
                          env=dict(os.environ, MPWATCH_SCRIPTED_NVML=str(scenario), MPWATCH_GPU_TIMELINE_MB="0.004"))
        try:
            run.start()
            wait_for(lambda: '"thinned"' in _text(run.run_dir / "gpu.jsonl"), 120, what="gpu.jsonl thinned")
            run.ctl("stop")
            run.wait_exit(60)
        finally:
            run.cleanup()
        keep_run_dir(run.run_dir, dest)
        normalise(dest, run.run_dir, f"/home/user/mpwatch-runs/{dest.name}")


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


if __name__ == "__main__":
    for name, record in (("oom-gpu", record_oom), ("thinned-gpu", record_thinned)):
        record(DATA / name)
        print(f"recorded {DATA / name}")
