"""Stop: time from `mpwatch ctl stop` to the last process of a 16-worker run (each worker
with 2 children) being gone; the alternative is SIGTERM to torchrun running the same script.

Each worker starts its two children, then writes its own and their pids to a file: the
bench watches exactly those 48 processes (zombies count as gone) from the moment it
issues the stop, and also times the launcher's own exit.
"""
from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time

from bench import measure
from bench.harness import fmt_value, row

NPROC = 16
CHILDREN = 2

SCRIPT = r'''
import json, os, subprocess, sys, time
import mpwatch
marks, n = sys.argv[1], int(sys.argv[2])
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]) for _ in range(n)]
mpwatch.report(step=0, loss=1.0)
tmp = os.path.join(marks, "rank-%s.tmp" % os.environ["RANK"])
with open(tmp, "w") as f:
    json.dump([os.getpid()] + [k.pid for k in kids], f)
os.replace(tmp, tmp[:-4] + ".pids")
while True:
    time.sleep(1)
'''


def _ready_pids(marks, n, proc, timeout=120.0):
    def ready():
        if proc.poll() is not None:
            raise RuntimeError(f"the launcher exited early ({proc.returncode})")
        files = list(marks.glob("rank-*.pids"))
        return files if len(files) == n else None

    files = measure.wait_for(ready, timeout, interval=0.1, what=f"{n} workers with their children")
    pids = []
    for f in files:
        pids.extend(json.loads(f.read_text()))
        f.unlink()
    return pids


def _time_until_gone(pids, t0, proc, timeout=120.0):
    """(seconds until every pid is gone, seconds until the launcher exited), both from t0."""
    left = set(pids)
    t_gone = t_exit = None
    deadline = t0 + timeout
    while (left or t_exit is None) and time.monotonic() < deadline:
        left = {p for p in left if measure.alive(p)}
        now = time.monotonic()
        if not left and t_gone is None:
            t_gone = now - t0
        if t_exit is None and proc.poll() is not None:
            t_exit = now - t0
        time.sleep(0.005)
    if left:
        measure.kill_all(left)
        raise RuntimeError(f"{len(left)} process(es) still alive {timeout:g}s after the stop")
    return t_gone, t_exit


def run_mpwatch(dir, script, marks, n, name, by_signal=False, tree=None):
    """Stopped with `mpwatch ctl stop`, or (by_signal) with SIGTERM as torchrun is; `tree`:
    the mpwatch of that folder (measure.tree_at), its ctl too."""
    env = measure.clean_env(**({"PYTHONPATH": tree} if tree else {}))
    with measure.Headless(dir, script, marks, CHILDREN, n=n, name=name, env=env) as h:
        pids = _ready_pids(marks, n, h.proc)
        h.pids.update(pids)
        ctl = [*measure.mpwatch_cmd(), "ctl", "--run", str(h.run_dir), "stop"]
        t0 = time.monotonic()
        if by_signal:
            h.proc.send_signal(signal.SIGTERM)
            return (*_time_until_gone(pids, t0, h.proc), None)
        done = {}
        res = subprocess.Popen(ctl, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        waiter = threading.Thread(target=lambda: done.setdefault("t", (res.wait(), time.monotonic() - t0)[1]))
        waiter.start()
        gone, exited = _time_until_gone(pids, t0, h.proc)
        waiter.join(timeout=60)
    return gone, exited, done.get("t")


def run_torchrun(script, marks, n):
    cmd = [measure.TORCHRUN, "--standalone", "--nproc-per-node", str(n), str(script), str(marks), str(CHILDREN)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=measure.clean_env(),
                            start_new_session=True)
    pids = []
    try:
        pids = _ready_pids(marks, n, proc)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        return (*_time_until_gone(pids, t0, proc), None)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        measure.kill_all(p for p in pids if measure.alive(p))


def run(quick: bool = False) -> list[dict]:
    n, reps = (4, 1) if quick else (NPROC, 3)
    res = {"mpwatch": [], "mpwatch-term": [], "torchrun": [], "before": []}
    at = contextlib.nullcontext("not asked") if quick else measure.tree_at(measure.BEFORE_ISSUE_13)
    with measure.scratch("stop") as d, at as tree:
        script = measure.write_script(d, "with_children.py", SCRIPT)
        marks = d / "marks"
        marks.mkdir()
        sides = ["mpwatch", "torchrun", "mpwatch-term"] if measure.TORCHRUN else ["mpwatch", "mpwatch-term"]
        sides += [] if isinstance(tree, str) else ["before"]
        for i, who in measure.alternated(reps, sides):
            if who == "before":  # `ctl stop` with the supervisor and ctl before the redesign
                res[who].append(run_mpwatch(d, script, marks, n, name=f"{who}-{i}", tree=tree))
            elif who.startswith("mpwatch"):
                res[who].append(run_mpwatch(d, script, marks, n, name=f"{who}-{i}", by_signal=who != "mpwatch"))
            else:
                res[who].append(run_torchrun(script, marks, n))

    def med(who, k):
        return measure.median([r[k] for r in res[who]])

    cmd = measure.shown([*measure.mpwatch_cmd(), "ctl", "--run", "RUN", "stop"])
    cmd_t = "kill -TERM TORCHRUN_PID"
    procs = n * (1 + CHILDREN)
    return [
        row(f"Stop: `ctl stop` to the last of {procs} processes gone ({n} workers x {CHILDREN} children)", cmd,
            med("mpwatch", 0), med("torchrun", 0) if res["torchrun"] else None, alt_name=f"torchrun: {cmd_t}",
            unit="s", note=f"median of {reps} run(s), alternated; includes the `mpwatch ctl` process itself, which "
                           f"returned after {fmt_value(med('mpwatch', 2), 's')} (start-up, connect, the supervisor's "
                           f"reply once the signals are sent); workers and children die on SIGTERM (the grace period "
                           f"is not reached)"),
        row("Stop: the same, to the launcher's own exit", cmd, med("mpwatch", 1),
            med("torchrun", 1) if res["torchrun"] else None, alt_name="torchrun", unit="s"),
        row(f"Stop: SIGTERM to the launcher, to the last of {procs} processes gone (like-for-like)",
            "kill -TERM MPWATCH_PID", med("mpwatch-term", 0), med("torchrun", 0) if res["torchrun"] else None,
            alt_name=f"torchrun: {cmd_t}", unit="s",
            note=f"to the launcher's exit: mpwatch {fmt_value(med('mpwatch-term', 1), 's')}, torchrun "
                 f"{fmt_value(med('torchrun', 1) if res['torchrun'] else None, 's')}"),
    ] + ([] if not res["before"] else [
        row(f"Stop: `ctl stop` to the last of {procs} processes gone, against the code before issue 13", cmd,
            med("mpwatch", 0), med("before", 0), alt_name=f"before issue 13 ({measure.BEFORE_ISSUE_13})", unit="s",
            note=f"the same runs alternated with the supervisor and ctl before the redesign; to the launcher's "
                 f"exit: {fmt_value(med('mpwatch', 1), 's')} now, {fmt_value(med('before', 1), 's')} before"),
    ])
