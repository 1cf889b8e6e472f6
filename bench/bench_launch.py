"""Launch: wall time from the command to every worker's first report, 4 workers of a script
that imports torch and reports once, `mpwatch --headless` against `torchrun --standalone`.

Three figures per launcher, from the same runs:
- first report: mpwatch: the moment the supervisor's status shows a report from every rank
  (polled over the control socket every POLL_S); torchrun has no reports, so it is measured
  to the workers' exit, as the issue asks;
- report call: the moment the last rank called report(), as the script itself records it
  (the same for both launchers: the fairest view of launch overhead alone);
- exit: the command's own exit, for both.

And the same on two nodes (two supervisors, or two torchrun agents, at 127.0.0.1 and
127.0.0.2 on this machine, static rendezvous, NODE_PROCS workers each): from launching
both to the last report() call, and to both launchers' exit.
"""
from __future__ import annotations

import os
import subprocess
import time

from bench import measure
from bench.harness import row
from mpwatch.supervisor import spawn

NPROC = 4
NODE_PROCS = 2  # workers per node in the two-node runs
ADDRS = ("127.0.0.1", "127.0.0.2")
TARGET = 0.8
POLL_S = 0.025

SCRIPT = r'''
import os, sys, time
import torch
import mpwatch
mpwatch.report(step=0, loss=float(torch.zeros(()).item()))
# Both launchers: record when this rank reported (the bench reads these files).
with open(os.path.join(sys.argv[1], "rank-%s.t" % os.environ["RANK"]), "w") as f:
    f.write(repr(time.time()))
'''


def _report_times(dir, n, t0_wall):
    times = []
    for r in range(n):
        try:
            times.append(float((dir / f"rank-{r}.t").read_text()))
        except (OSError, ValueError):
            return None
    return max(times) - t0_wall


def run_torchrun(script, marks, n):
    for f in marks.glob("rank-*.t"):
        f.unlink()
    cmd = [measure.TORCHRUN, "--standalone", "--nproc-per-node", str(n), str(script), str(marks)]
    t0w, t0 = time.time(), time.monotonic()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=measure.clean_env(), timeout=300)
    t_exit = time.monotonic() - t0
    if res.returncode != 0:
        raise RuntimeError(f"torchrun exited {res.returncode}: {res.stderr.strip().splitlines()[-1:]}")
    return {"first": t_exit, "call": _report_times(marks, n, t0w), "exit": t_exit}


def run_mpwatch(dir, script, marks, n, name):
    for f in marks.glob("rank-*.t"):
        f.unlink()
    h = measure.Headless(dir, script, marks, n=n, name=name)
    t0w = time.time()
    with h:  # starts the clock (h.t0) and the command
        t_first = None
        client = h.client(timeout=120)
        while t_first is None and h.proc.poll() is None:
            try:
                ws = client.status()["workers"]
            except Exception:  # noqa: BLE001 - the run ended between polls
                break
            if len(ws) == n and all(w["reports"] >= 1 for w in ws):
                t_first = time.monotonic() - h.t0
                break
            time.sleep(POLL_S)
        rc = h.wait(timeout=300)
        t_exit = time.monotonic() - h.t0
        if rc != 0:
            raise RuntimeError(f"mpwatch exited {rc}: {h.stderr_tail()}")
        if t_first is None:
            # The run ended between two polls: the reports are in the final snapshot.
            final = h.final() or {}
            if all(w.get("reports", 0) >= 1 for w in final.get("workers", [])):
                t_first = t_exit
    return {"first": t_first, "call": _report_times(marks, n, t0w), "exit": t_exit}


def node_flags(node: int, port: int) -> list[str]:
    """torchrun's flags for one of two nodes on this machine (mpwatch takes the same)."""
    return ["--nnodes", "2", "--node-rank", str(node), "--master-addr", ADDRS[0], "--master-port", str(port),
            "--local-addr", ADDRS[node], "--nproc-per-node", str(NODE_PROCS)]


def _wait_all(procs, timeout: float) -> list[float]:
    """Each process's exit time (monotonic); kills the rest if the timeout passes."""
    ends: list[float | None] = [None] * len(procs)
    deadline = time.monotonic() + timeout
    while any(e is None for e in ends):
        for i, p in enumerate(procs):
            if ends[i] is None and p.poll() is not None:
                ends[i] = time.monotonic()
        if time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            raise RuntimeError("a launcher did not exit in time")
        time.sleep(0.01)
    return [e for e in ends if e is not None]


def run_two_nodes(who, dir, script, marks, i):
    """Both nodes launched at once: the last report() call and the last launcher's exit."""
    for f in marks.glob("rank-*.t"):
        f.unlink()
    port = spawn.free_port()
    if who == "mpwatch":
        cmds = [[*measure.mpwatch_cmd(), "--headless", "--run-dir", str(dir / f"n{i}-{node}"), *node_flags(node, port),
                 str(script), str(marks)] for node in (0, 1)]
    else:
        cmds = [[measure.TORCHRUN, *node_flags(node, port), str(script), str(marks)] for node in (0, 1)]
    errs = [dir / f"{who}-{i}-node{node}.err" for node in (0, 1)]
    t0w, t0 = time.time(), time.monotonic()
    procs = []
    for cmd, err in zip(cmds, errs, strict=True):
        with open(err, "wb") as f:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=f, env=measure.clean_env(),
                                          cwd=dir, start_new_session=True))
    ends = _wait_all(procs, 300)
    for p, err in zip(procs, errs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"{who} exited {p.returncode}: {err.read_text(errors='replace').splitlines()[-1:]}")
    return {"call": _report_times(marks, 2 * NODE_PROCS, t0w), "exit": max(ends) - t0}


def two_node_rows(d, script, marks, reps) -> list[dict]:
    res: dict[str, list[dict]] = {"mpwatch": [], "torchrun": []}
    for i, who in measure.alternated(reps, ["mpwatch", "torchrun"]):
        res[who].append(run_two_nodes(who, d, script, marks, i))

    def med(who, key):
        return measure.median([r[key] for r in res[who]])

    cmd_m = measure.shown([*measure.mpwatch_cmd(), "--headless", *node_flags(1, 29500), "report_once.py"])
    cmd_t = measure.shown([measure.TORCHRUN, *node_flags(1, 29500), "report_once.py"])
    runs = (f"median of {reps} run(s) each, alternated; two launchers started together, one per node "
            f"(127.0.0.1, 127.0.0.2), {NODE_PROCS} workers each importing torch, {os.cpu_count()} cores")
    return [
        row(f"Launch, 2 nodes x {NODE_PROCS} workers: both commands to the last report() call", cmd_m,
            med("mpwatch", "call"), med("torchrun", "call"), alt_name="torchrun (2 agents)", unit="s",
            note=f"static rendezvous; the script writes time.time() right after report(); vs `{cmd_t}`; {runs}"),
        row(f"Launch, 2 nodes x {NODE_PROCS} workers: both commands to the last launcher's exit", cmd_m,
            med("mpwatch", "exit"), med("torchrun", "exit"), alt_name="torchrun (2 agents)", unit="s",
            note="each supervisor waits for the other node before it exits, as torchrun's exit barrier does"),
    ]


def run(quick: bool = False) -> list[dict]:
    if measure.TORCHRUN is None:
        raise ImportError(name="torchrun (torch)")
    reps = 1 if quick else 5
    res = {"mpwatch": [], "torchrun": []}
    with measure.scratch("launch") as d:
        script = measure.write_script(d, "report_once.py", SCRIPT)
        marks = d / "marks"
        marks.mkdir()
        retried = []
        for i, who in measure.alternated(reps, ["mpwatch", "torchrun"]):
            for attempt in (1, 2):  # one retry: on a shared box another job may end a run of ours
                try:
                    if who == "mpwatch":
                        res[who].append(run_mpwatch(d, script, marks, NPROC, name=f"run-{i}-{attempt}"))
                    else:
                        res[who].append(run_torchrun(script, marks, NPROC))
                    break
                except RuntimeError as exc:
                    if attempt == 2:
                        raise
                    retried.append(f"{who}: {exc}"[:200])

        nodes = two_node_rows(d, script, marks, 1 if quick else 3)

    def med(who, key):
        return measure.median([r[key] for r in res[who]])

    cmd_m = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", str(NPROC), "report_once.py"])
    cmd_t = measure.shown([measure.TORCHRUN, "--standalone", "--nproc-per-node", str(NPROC), "report_once.py"])
    m_first, t_exit = med("mpwatch", "first"), med("torchrun", "exit")
    ratio = m_first / t_exit if m_first and t_exit else None
    runs = f"median of {reps} run(s) each, alternated; {os.cpu_count()} cores for {NPROC} workers importing torch"
    return [
        row(f"Launch: command to every worker's first report ({NPROC} workers, torch)", cmd_m, m_first, t_exit,
            alt_name="torchrun, to exit", unit="s", target=f"≤ {TARGET:g}x torchrun",
            ok=None if ratio is None else ratio <= TARGET,
            note=f"mpwatch: report seen in `ctl status` (polled every {POLL_S * 1000:.0f} ms); torchrun: to the "
                 f"workers' exit ({cmd_t}); {runs}" + (f"; retried {len(retried)} run(s): {retried[0]}"
                                                          if retried else "")),
        row("Launch: command to the last report() call, as the script records it", cmd_m,
            med("mpwatch", "call"), med("torchrun", "call"), alt_name="torchrun", unit="s",
            note="launch overhead alone, measured the same way for both: the script writes time.time() "
                 "right after report()"),
        row("Launch: command to exit (the fair like-for-like)", cmd_m, med("mpwatch", "exit"), t_exit,
            alt_name="torchrun", unit="s",
            note="both measured to the launcher's own exit after all workers ended"),
        *nodes,
    ]
