"""The workers' OpenMP default (supervisor.spawn.openmp, torchrun's): 3 ranks of demo/hang.py (gloo
DDP) on this machine, each with one OpenMP thread as mpwatch now starts them, against each with a
thread per core as they started before (OMP_NUM_THREADS set to the core count: the user's own value
stands, so this is the old default). The figure is the CPU time of the whole run (supervisor,
forkserver, workers: every process is reaped up the tree) and its wall time, for the same steps.
"""
from __future__ import annotations

import os
import sys

from bench import measure
from bench.harness import row

RANKS = 3
STEPS = 300
STEP_S = 0.02


def _once(run_dir, threads: str | None) -> tuple[float, float]:
    env = measure.clean_env()
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    cmd = [*measure.mpwatch_cmd(), "--headless", "-n", str(RANKS), "--run-dir", str(run_dir),
           str(measure.ROOT / "demo" / "hang.py"), "--steps", str(STEPS), "--step-time", str(STEP_S)]
    return measure.whole_run(cmd, env)


def run(quick: bool = False) -> list[dict]:
    reps = 1 if quick else 5
    cores = str(len(os.sched_getaffinity(0)))
    got: dict[str, list[tuple[float, float]]] = {"default": [], "cores": []}
    with measure.scratch("openmp") as tmp:
        for i, who in measure.alternated(reps, list(got)):
            got[who].append(_once(tmp / f"{who}-{i}", None if who == "default" else cores))
    cpu = {k: measure.median([c for c, _ in v]) for k, v in got.items()}
    wall = {k: measure.median([w for _, w in v]) for k, v in got.items()}
    cmd = f"mpwatch --headless -n {RANKS} demo/hang.py --steps {STEPS} --step-time {STEP_S}"
    span = {k: f"{min(c for c, _ in v):.1f}-{max(c for c, _ in v):.1f}" for k, v in got.items()}
    note = (f"median of {reps} alternated runs each; {RANKS} ranks on {cores} cores, {STEPS} steps of at least "
            f"{STEP_S} s; CPU of the supervisor, the forkserver and the workers (reaped children), "
            f"{span['default']} CPU-s with one thread, {span['cores']} with {cores}")
    return [
        row("The workers' OpenMP default: CPU of a 3-rank gloo run, one thread a rank against one a core",
            cmd, cpu["default"], cpu["cores"], alt_name=f"OMP_NUM_THREADS={cores} (before)", unit="CPU-s",
            note=note),
        row("The workers' OpenMP default: wall time of the same run", cmd, wall["default"], wall["cores"],
            alt_name=f"OMP_NUM_THREADS={cores} (before)", unit="s", note=f"median of {reps} alternated runs each"),
    ]


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
