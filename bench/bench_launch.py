"""Launch: wall time from the command to every worker's first report, 4 workers of a script
that imports torch and reports once, `mpwatch --headless` against `torchrun --standalone`.

Three figures per launcher, from the same runs:
- first report: mpwatch: the moment the supervisor's status shows a report from every rank
  (polled over the control socket every POLL_S); torchrun has no reports, so it is measured
  to the workers' exit, as the issue asks;
- report call: the moment the last rank called report(), as the script itself records it
  (the same for both launchers: the fairest view of launch overhead alone);
- exit: the command's own exit, for both.

mpwatch forks its workers from one process that imported torch once (supervisor.preload); the
same runs with --no-preload (each worker imports torch itself, as before issue 43) are
alternated with them.

And the same on two nodes (two supervisors, or two torchrun agents, at 127.0.0.1 and
127.0.0.2 on this machine, static rendezvous, NODE_PROCS workers each): from launching
both to the last report() call, and to both launchers' exit.

A restart: rank 1 of 4 fails after its first report; mpwatch --max-restarts 1 starts it alone
again (forked), torchrun --max-restarts 1 stops and starts every worker (each imports torch
again): from the failing process's last moment (it writes the time) to the restarted rank's
first report() call (it writes the time), and, for mpwatch, to the supervisor showing it.
"""
from __future__ import annotations

import os
import subprocess
import time

import psutil

from bench import measure
from bench.harness import row
from mpwatch.supervisor import spawn

NPROC = 4
NODE_PROCS = 2  # workers per node in the two-node runs
ADDRS = ("127.0.0.1", "127.0.0.2")
TARGET = 0.4  # issue 43 (0.8 before the forkserver)
RESTART_TARGET_S = 0.3
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


RESTART = r'''
import os, sys, time
import torch
import mpwatch
marks = sys.argv[1]
rank, attempt = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
mpwatch.report(step=0, loss=float(torch.zeros(()).item()))
with open(os.path.join(marks, "rank-%s-%s.t" % (rank, attempt)), "w") as f:
    f.write(repr(time.time()))
if rank == "1" and attempt == "0":
    time.sleep(1.5)  # its first report is through
    with open(os.path.join(marks, "failed.t"), "w") as f:
        f.write(repr(time.time()))
    os._exit(1)
while not os.path.exists(os.path.join(marks, "release")):
    time.sleep(0.05)
'''


def run_mpwatch(dir, script, marks, n, name, opts=()):
    for f in marks.glob("rank-*.t"):
        f.unlink()
    h = measure.Headless(dir, script, marks, n=n, name=name, opts=opts)
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


SIDES = ["mpwatch", "no-preload", "torchrun"]


def _launches(d, script, marks, reps: int) -> tuple[dict[str, list[dict]], list[str]]:
    """Each side's runs, alternated: mpwatch (forked workers), --no-preload, torchrun."""
    res: dict[str, list[dict]] = {who: [] for who in SIDES}
    retried: list[str] = []
    for i, who in measure.alternated(reps, SIDES):
        for attempt in (1, 2):  # one retry: on a shared box another job may end a run of ours
            try:
                if who == "torchrun":
                    res[who].append(run_torchrun(script, marks, NPROC))
                else:
                    opts = ["--no-preload"] if who == "no-preload" else []
                    res[who].append(run_mpwatch(d, script, marks, NPROC, f"{who}-{i}-{attempt}", opts))
                break
            except RuntimeError as exc:
                if attempt == 2:
                    raise
                retried.append(f"{who}: {exc}"[:200])
    return res, retried


def run(quick: bool = False) -> list[dict]:
    if measure.TORCHRUN is None:
        raise ImportError(name="torchrun (torch)")
    reps = 1 if quick else 5
    with measure.scratch("launch") as d:
        script = measure.write_script(d, "report_once.py", SCRIPT)
        marks = d / "marks"
        marks.mkdir()
        res, retried = _launches(d, script, marks, reps)
        nodes = two_node_rows(d, script, marks, 1 if quick else 3)
        restarts = restart_rows(d, 1 if quick else 5)
        memory = memory_rows(d)
    return launch_rows(res, retried, reps) + nodes + restarts + memory


def launch_rows(res: dict[str, list[dict]], retried: list[str], reps: int) -> list[dict]:
    def med(who, key):
        return measure.median([r[key] for r in res[who]])

    cmd_m = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", str(NPROC), "report_once.py"])
    cmd_t = measure.shown([measure.TORCHRUN, "--standalone", "--nproc-per-node", str(NPROC), "report_once.py"])
    m_first, t_exit, n_first = med("mpwatch", "first"), med("torchrun", "exit"), med("no-preload", "first")
    ratio = m_first / t_exit if m_first and t_exit else None
    runs = (f"median of {reps} run(s) each, alternated with --no-preload and torchrun; {os.cpu_count()} cores "
            f"(shared) for {NPROC} workers importing torch")
    return [
        row(f"Launch: command to every worker's first report ({NPROC} workers, torch)", cmd_m, m_first, t_exit,
            alt_name="torchrun, to exit", unit="s", target=f"≤ {TARGET:g}x torchrun",
            ok=None if ratio is None else ratio <= TARGET,
            note=f"mpwatch: report seen in `ctl status` (polled every {POLL_S * 1000:.0f} ms), the workers forked "
                 f"from one process that imported torch; torchrun: to the workers' exit ({cmd_t}); {runs}"
                 + (f"; retried {len(retried)} run(s): {retried[0]}" if retried else "")),
        row("Launch: the same, forked against --no-preload (each worker imports torch, as before issue 43)",
            cmd_m, m_first, n_first, alt_name="mpwatch --no-preload", unit="s",
            note=f"--no-preload to torchrun's exit: {n_first / t_exit:.2f}x" if n_first and t_exit else ""),
        row("Launch: command to the last report() call, as the script records it", cmd_m,
            med("mpwatch", "call"), med("torchrun", "call"), alt_name="torchrun", unit="s",
            note="launch overhead alone, measured the same way for both: the script writes time.time() "
                 f"right after report(); --no-preload: {med('no-preload', 'call'):.2f} s"),
        row("Launch: command to exit (the fair like-for-like)", cmd_m, med("mpwatch", "exit"), t_exit,
            alt_name="torchrun", unit="s",
            note="both measured to the launcher's own exit after all workers ended; --no-preload: "
                 f"{med('no-preload', 'exit'):.2f} s"),
    ]


def _restart_mpwatch(d, script, marks, i: int) -> dict:
    with measure.Headless(d, script, marks, n=NPROC, opts=["--max-restarts", "1"], name=f"restart-{i}") as h:
        client = h.client(timeout=120)
        seen = None
        while seen is None and h.proc.poll() is None:
            try:
                w = next(w for w in client.status()["workers"] if w["rank"] == 1)
            except (StopIteration, Exception):  # noqa: BLE001 - not listed yet, or the run ended
                w = None
            if w is not None and w["restarts"] >= 1 and w["reports"] >= 2:
                seen = time.time()
                break
            time.sleep(0.01)
        (marks / "release").touch()
        rc = h.wait(timeout=120)
        if rc != 0 or seen is None:
            raise RuntimeError(f"mpwatch exited {rc}: {h.stderr_tail()}")
    return {"call": _restart_call(marks), "seen": seen - float((marks / "failed.t").read_text())}


def _restart_call(marks) -> float:
    return float((marks / "rank-1-1.t").read_text()) - float((marks / "failed.t").read_text())


def _restart_torchrun(script, marks) -> dict:
    cmd = [measure.TORCHRUN, "--standalone", "--max-restarts", "1", "--nproc-per-node", str(NPROC), str(script),
           str(marks)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=measure.clean_env(), start_new_session=True)
    try:
        measure.wait_for(lambda: (marks / "rank-1-1.t").exists() or proc.poll() is not None, 300,
                         interval=0.01, what="torchrun's restarted rank 1")
        (marks / "release").touch()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            measure.kill_all([proc.pid])
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun exited {proc.returncode}: {err.strip().splitlines()[-1:]}")
    return {"call": _restart_call(marks)}


HOLD = r'''
import os, sys, time
import torch
import mpwatch
x = torch.nn.Linear(256, 256)(torch.ones(8, 256)).sum()  # a step's worth of torch touched
mpwatch.report(step=0, loss=float(x))
while not os.path.exists(os.path.join(sys.argv[1], "release")):
    time.sleep(0.05)
'''


def _memory(d, script, opts: list[str], name: str) -> dict:
    """PSS and USS (psutil.memory_full_info) of the NPROC workers, and of the forkserver, once each
    has reported and touched torch."""
    marks = d / f"mem-{name}"
    marks.mkdir()
    with measure.Headless(d, script, marks, n=NPROC, opts=opts, name=name) as h:
        measure.wait_for(lambda: (lambda ws: len(ws) == NPROC and all(w["reports"] for w in ws))(
            h.status()["workers"]), 300, interval=0.1, what="every worker's report")
        time.sleep(1.0)
        pids = [w["pid"] for w in h.status()["workers"]]
        server = [e["pid"] for e in h.events("preloaded")]
        got = {"workers": [psutil.Process(p).memory_full_info() for p in pids],
               "server": [psutil.Process(p).memory_full_info() for p in server]}
        (marks / "release").touch()
        h.wait(timeout=120)
    return got


def memory_rows(d) -> list[dict]:
    script = measure.write_script(d, "hold.py", HOLD)
    forked, execd = _memory(d, script, [], "forked"), _memory(d, script, ["--no-preload"], "execd")
    mib = 2 ** 20

    def total(m: dict, key: str) -> float:
        return sum(getattr(x, key) for x in m["workers"] + m["server"]) / mib

    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", str(NPROC), "hold.py"])
    srv = forked["server"][0] if forked["server"] else None
    w_uss = measure.median([x.uss / mib for x in forked["workers"]])
    e_uss = measure.median([x.uss / mib for x in execd["workers"]])
    return [
        row(f"Memory of {NPROC} torch workers, PSS summed (the forkserver's included)", cmd, total(forked, "pss"),
            total(execd, "pss"), alt_name="--no-preload (each worker imports torch)", unit="MiB",
            note=f"psutil.memory_full_info once each worker reported and ran a Linear layer; RSS summed "
                 f"{total(forked, 'rss'):.0f} MiB forked, {total(execd, 'rss'):.0f} MiB exec'd (RSS counts shared "
                 f"pages in every process)"),
        row("Memory a forked worker has to itself (USS), median", cmd, w_uss, e_uss,
            alt_name="--no-preload", unit="MiB",
            note="what the worker does not share: its own pages (copied on write from the forkserver's, or its own)"),
        row("The forkserver itself: RSS, PSS, USS", cmd, srv.pss / mib if srv else None, unit="MiB (PSS)",
            note=(f"RSS {srv.rss / mib:.0f} MiB, USS {srv.uss / mib:.0f} MiB: torch imported once, its pages shared "
                  "with every worker it forked" if srv else "no forkserver ran")),
    ]


def restart_rows(d, reps: int) -> list[dict]:
    script = measure.write_script(d, "restart.py", RESTART)
    res: dict[str, list[dict]] = {"mpwatch": [], "torchrun": []}
    for i, who in measure.alternated(reps, ["mpwatch", "torchrun"]):
        marks = d / f"restart-marks-{who}-{i}"
        marks.mkdir()
        res[who].append(_restart_mpwatch(d, script, marks, i) if who == "mpwatch" else _restart_torchrun(script, marks))
    m_call = measure.median([r["call"] for r in res["mpwatch"]])
    t_call = measure.median([r["call"] for r in res["torchrun"]])
    seen = measure.median([r["seen"] for r in res["mpwatch"]])
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "--max-restarts", "1", "-n", str(NPROC), "restart.py"])
    spread = ", ".join(f"{r['call']:.2f}" for r in res["mpwatch"])
    return [
        row(f"Restart: a rank's failure to its restarted process's first report() call ({NPROC} ranks, torch)", cmd,
            m_call, t_call, alt_name="torchrun --max-restarts 1 (restarts every worker)", unit="s",
            target=f"≤ {RESTART_TARGET_S:g} s", ok=m_call <= RESTART_TARGET_S,
            note=f"rank 1 fails after its first report; mpwatch starts it alone again, forked from the process "
                 f"that imported torch; torchrun stops and starts all {NPROC}, each importing torch; from the "
                 f"failing process's last moment to the new rank 1's report() (both write time.time()); median of "
                 f"{reps} alternated runs each (mpwatch: {spread} s)"),
        row("Restart: a rank's failure to the supervisor showing its restarted process's first report", cmd, seen,
            unit="s", target=f"≤ {RESTART_TARGET_S:g} s", ok=seen <= RESTART_TARGET_S,
            note="the status polled every 10 ms over the control socket: rank 1 restarted, its second report "
                 "counted; the sender ships a process's first report within 20 ms"),
    ]
