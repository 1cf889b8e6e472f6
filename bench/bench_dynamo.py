"""What follows torch into the forkserver (worker.boot.forkserver's FOLLOWERS): torch imports its
compiler's front end, torch._dynamo, at the first optimizer (or DDP model, or torch.compile) a
worker builds. The forkserver imports it once after torch, so a forked worker finds it there. The
figure is the CPU time of a whole short run of 3 ranks of demo/hang.py (gloo DDP, SGD: every process
is reaped up the tree, supervisor, forkserver and workers) and its wall time, against the same runs
with the code before (torch alone preloaded) and without the forkserver (--no-preload).
"""
from __future__ import annotations

import sys
from pathlib import Path

from bench import measure
from bench.harness import row

RANKS = 3
STEPS = 60
STEP_S = 0.02
BEFORE = "46dc761"  # main before torch._dynamo followed torch into the forkserver


def _once(run_dir: Path, tree: Path | None, opts: list[str]) -> tuple[float, float]:
    """One run's CPU and wall time; `tree`: the code at BEFORE, run through the console script (a
    `python -m mpwatch` would find this checkout's first, in its working directory)."""
    env = measure.clean_env(PYTHONPATH=str(tree)) if tree is not None else measure.clean_env()
    cmd = [*measure.mpwatch_cmd(), "--headless", "-n", str(RANKS), "--run-dir", str(run_dir), *opts,
           str(measure.ROOT / "demo" / "hang.py"), "--steps", str(STEPS), "--step-time", str(STEP_S)]
    return measure.whole_run(cmd, env)


def run(quick: bool = False) -> list[dict]:
    reps = 1 if quick else 5
    got: dict[str, list[tuple[float, float]]] = {"now": [], "before": [], "exec": []}
    with measure.scratch("dynamo") as tmp, measure.tree_at(BEFORE) as tree:
        sides = list(got) if not isinstance(tree, str) else ["now", "exec"]
        for i, who in measure.alternated(reps, sides):
            got[who].append(_once(tmp / f"{who}-{i}", tree if who == "before" else None,
                                  ["--no-preload"] if who == "exec" else []))
    cpu = {k: measure.median([c for c, _ in v]) for k, v in got.items()}
    wall = {k: measure.median([w for _, w in v]) for k, v in got.items()}
    span = {k: f"{min(c for c, _ in v):.1f}-{max(c for c, _ in v):.1f}" if v else "-" for k, v in got.items()}
    cmd = f"mpwatch --headless -n {RANKS} demo/hang.py --steps {STEPS} --step-time {STEP_S}"
    alt = f"torch alone preloaded (before, {BEFORE})"
    note = (f"median of {reps} alternated runs each; {RANKS} ranks on 2 cores, {STEPS} steps; CPU of the "
            f"supervisor, the forkserver and the workers (reaped children): {span['now']} CPU-s now, "
            f"{span['before']} before, {span['exec']} with --no-preload (median {cpu['exec']:.1f})")
    return [
        row("torch._dynamo preloaded after torch: CPU of a short 3-rank gloo run (each rank builds an SGD)",
            cmd, cpu["now"], cpu["before"], alt_name=alt, unit="CPU-s", note=note),
        row("torch._dynamo preloaded after torch: wall time of the same run", cmd, wall["now"],
            wall["before"], alt_name=alt, unit="s",
            note=f"median of {reps} alternated runs each; --no-preload: {wall['exec']:.1f} s"),
    ]


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
