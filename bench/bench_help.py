"""`mpwatch --help` start time against `torchrun --help` and `nvitop --help` where installed.

The figure is the wall time of the whole command, the way a user feels it: interpreter
start, imports, argparse, print, exit.
"""
from __future__ import annotations

import shutil
import subprocess
import time

from bench import measure
from bench.harness import row


def _time(cmd) -> float:
    t0 = time.monotonic()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=measure.clean_env(), timeout=120)
    dt = time.monotonic() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{measure.shown(cmd)} exited {res.returncode}: {res.stderr.strip()[-200:]}")
    return dt


def run(quick: bool = False) -> list[dict]:
    reps = 2 if quick else 7
    others = {"torchrun": measure.TORCHRUN,
              "nvitop": str(measure.BIN / "nvitop") if (measure.BIN / "nvitop").exists() else shutil.which("nvitop")}
    cmds = {"mpwatch": [*measure.mpwatch_cmd(), "--help"]}
    cmds.update({k: [v, "--help"] for k, v in others.items() if v})
    times = {k: [] for k in cmds}
    _time(cmds["mpwatch"])  # warm the page cache for ours too, as the others are warmed by their first rep
    for _, who in measure.alternated(reps, list(cmds)):
        times[who].append(_time(cmds[who]))
    ours = measure.median(times["mpwatch"])
    rows = []
    for name in others:
        if name in cmds:
            rows.append(row(f"`--help` start time vs {name}", measure.shown(cmds["mpwatch"]), ours,
                            measure.median(times[name]), alt_name=f"{name} --help", unit="s",
                            note=f"median of {reps} runs each, alternated"))
        else:
            rows.append(row(f"`--help` start time vs {name}", measure.shown(cmds["mpwatch"]), ours,
                            alt_name=f"{name}: not installed", unit="s", note=f"median of {reps} runs"))
    return rows
