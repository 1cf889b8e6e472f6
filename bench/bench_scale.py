"""Scale: N workers of a pure-Python reporter at 100 reports/s each; the supervisor's CPU
share and memory, and every report accounted for.

How the count is exact: each worker counts the reports it made; when the bench says stop,
it stops reporting, writes its count to a file, and stays alive until released, so its
sender has shipped everything before anything ends. The bench then compares, per rank,
what the worker made with what the supervisor's status shows: `reports` (received) and
`dropped` (the gaps the worker's buffer declared). lost = made - received, and
unaccounted = lost - dropped must be 0.

The supervisor's CPU share is psutil's user+system time of the supervisor process over a
window in which nothing else talks to it (no status polls).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench import measure
from bench.harness import row

RATE = 100.0
TARGET_PCT = 10.0  # of one core, at 64 workers
TARGET_256_PCT = 5.0  # of one core, at 256 workers (issue 43)

REPORTER = r'''
import os, sys, time
import mpwatch
rate, marks = float(sys.argv[1]), sys.argv[2]
stop, release = os.path.join(marks, "stop"), os.path.join(marks, "release")
period = 1.0 / rate
sent = 0
next_t = time.monotonic()
while True:
    mpwatch.report(step=sent, loss=1.0 / (sent + 1))
    sent += 1
    if sent % 10 == 0 and os.path.exists(stop):
        break
    next_t += period
    delay = next_t - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    elif delay < -1.0:
        next_t = time.monotonic()  # far behind (a saturated machine): do not burst to catch up
tmp = os.path.join(marks, "rank-%s.tmp" % os.environ["RANK"])
with open(tmp, "w") as f:
    f.write(str(sent))
os.replace(tmp, tmp[:-4] + ".sent")
while not os.path.exists(release):
    time.sleep(0.1)
'''


def one_size(n: int, window: float, start_timeout: float, settle_timeout: float = 60.0, env=None) -> dict:
    with measure.scratch(f"scale{n}") as d:
        script = measure.write_script(d, "reporter.py", REPORTER)
        marks = d / "marks"
        marks.mkdir()
        with measure.Headless(d, script, RATE, marks, n=n, name="run", env=env) as h:
            t_start = time.monotonic()
            reporting = 0

            def all_reporting():
                nonlocal reporting
                reporting = sum(1 for w in h.status()["workers"] if w["reports"] > 0)
                return reporting == n

            try:
                measure.wait_for(all_reporting, start_timeout, interval=0.5, what=f"all {n} workers reporting")
            except TimeoutError:
                pass  # a saturated machine: measure what the supervisor manages, and say so
            started_in = time.monotonic() - t_start
            time.sleep(1.0)  # let the start-up burst settle
            sup = psutil.Process(h.proc.pid)
            before = sum(w["reports"] for w in h.status()["workers"])
            psutil.cpu_percent(None)
            c0, t0 = sup.cpu_times(), time.monotonic()
            rss_peak = 0
            while time.monotonic() - t0 < window:
                rss_peak = max(rss_peak, sup.memory_info().rss)
                time.sleep(0.25)
            c1, t1 = sup.cpu_times(), time.monotonic()
            machine = psutil.cpu_percent(None)
            rss_peak = max(rss_peak, sup.memory_info().rss)
            end = h.status()["workers"]
            after = sum(w["reports"] for w in end)
            ages = sorted(w["heartbeat_age"] for w in end if w["heartbeat_age"] is not None)
            cpu_pct = 100.0 * ((c1.user - c0.user) + (c1.system - c0.system)) / (t1 - t0)
            # Stop reporting, collect every worker's own count, let the senders drain.
            (marks / "stop").touch()
            measure.wait_for(lambda: len(list(marks.glob("rank-*.sent"))) == n, 120, interval=0.2,
                             what="every worker's count")
            sent = {int(p.name[5:-5]): int(p.read_text()) for p in marks.glob("rank-*.sent")}

            def settled():
                ws = {w["rank"]: w for w in h.status()["workers"]}
                return ws if all(ws[r]["reports"] + ws[r]["dropped"] >= sent[r] for r in sent) else None

            try:
                ws = measure.wait_for(settled, settle_timeout, interval=0.5,
                                      what="the supervisor to count every report")
            except TimeoutError:
                ws = {w["rank"]: w for w in h.status()["workers"]}
            (marks / "release").touch()
            h.wait(timeout=120)
    made = sum(sent.values())
    received = sum(ws[r]["reports"] for r in sent)
    dropped = sum(ws[r]["dropped"] for r in sent)
    return {"cpu_pct": cpu_pct, "rss_mib": rss_peak / 2**20, "made": made, "received": received,
            "dropped": dropped, "lost": made - received, "unaccounted": made - received - dropped,
            "rate": (after - before) / (t1 - t0) / n, "machine_pct": machine, "started_in": started_in,
            "reporting": reporting, "age_med": measure.median(ages), "age_max": ages[-1] if ages else None,
            "window": t1 - t0}


def side_by_side(n: int, window: float, rounds: int, commit: str) -> tuple[dict, dict | str]:
    """The run at n workers with this supervisor and with the one at `commit`, alternated:
    the medians of each (or why there is no "before")."""
    now: list[dict] = []
    before: list[dict] = []
    with measure.tree_at(commit) as tree:
        sides = ["now", "before"] if not isinstance(tree, str) else ["now"]
        for _, side in measure.alternated(rounds, sides):
            env = None if side == "now" else measure.clean_env(PYTHONPATH=tree)
            (now if side == "now" else before).append(one_size(n, window, start_timeout=30 + n // 4, env=env))
    return _median_run(now), (_median_run(before) if before else str(tree))


def _median_run(runs: list[dict]) -> dict:
    """The run of median supervisor CPU, its RSS the median of all."""
    mid = sorted(runs, key=lambda r: r["cpu_pct"])[len(runs) // 2]
    return dict(mid, rss_mib=measure.median([r["rss_mib"] for r in runs]), rounds=len(runs),
                lost_all=sum(r["unaccounted"] for r in runs))


def size_rows(n: int, window: float, rounds: int, commit: str, target: float | None) -> list[dict]:
    r, base = side_by_side(n, window, rounds, commit)
    old = base if isinstance(base, dict) else None
    issue = "13" if commit == measure.BEFORE_ISSUE_13 else "43"
    alt = f"before issue {issue} ({commit})"
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", str(n), "reporter.py", str(RATE)])
    started = (f"all {n} reporting {r['started_in']:.0f} s after launch" if r["reporting"] == n else
               f"only {r['reporting']} of {n} workers had a report through after {r['started_in']:.0f} s "
               f"(the supervisor fell behind)")
    how = ", alternated with the supervisor before issue " + issue if old else ""
    load = (f"median of {r['rounds']} run(s){how}; the supervisor took in {r['rate']:.0f} reports/s per "
            f"worker in the window (each sends {RATE:.0f}); machine CPU {r['machine_pct']:.0f}% of "
            f"{os.cpu_count()} cores over the {r['window']:.0f} s window; {started}; heartbeat age at the "
            f"window's end: median {r['age_med']:.2f} s, max {r['age_max']:.2f} s")
    if old:
        load += f" (before: median {old['age_med']:.2f} s, max {old['age_max']:.2f} s)"
    else:
        load += f"; no side-by-side: {base}"
    tgt = f"< {target:g}% of a core" if target else None
    return [
        row(f"Scale {n} workers x {RATE:.0f} reports/s: supervisor CPU", cmd, r["cpu_pct"],
            old["cpu_pct"] if old else None, alt_name=alt if old else None, unit="% of a core", target=tgt,
            ok=(r["cpu_pct"] < target) if target else None, note=load),
        row(f"Scale {n} workers: supervisor RSS (peak in window)", cmd, r["rss_mib"],
            old["rss_mib"] if old else None, alt_name=alt if old else None, unit="MiB"),
        row(f"Scale {n} workers: reports lost", cmd, r["lost"], unit="reports",
            target="all counted (unaccounted 0)", ok=r["lost_all"] == 0 and (old is None or old["lost_all"] == 0),
            note=f"made {r['made']}, received {r['received']}, dropped by the worker buffer "
                 f"(declared) {r['dropped']}, unaccounted {r['unaccounted']}"
                 + (f"; in all {r['rounds']} runs: {r['lost_all']}" if r["rounds"] > 1 else "")
                 + (f"; before, in all its runs: {old['lost_all']}" if old else "")),
    ]


PARTS = Path(__file__).with_name("supervisor_parts.py")


def _parts(n: int, tree: Path | None) -> dict:
    env = measure.clean_env(**({"PYTHONPATH": str(tree)} if tree is not None else {}))
    res = subprocess.run([sys.executable, str(PARTS), str(n)], capture_output=True, text=True, env=env,
                         timeout=600, cwd=tree or measure.ROOT)
    if res.returncode != 0:
        raise RuntimeError(f"supervisor_parts {n}: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def parts_rows(n: int, rounds: int) -> list[dict]:
    """The supervisor's own work at n ranks in one process (bench/supervisor_parts.py), by CPU
    time, alternated with the code before issue 43."""
    got: dict[str, list[dict]] = {"now": [], "before": []}
    with measure.tree_at(measure.BEFORE_ISSUE_43) as tree:
        sides = ["now", "before"] if not isinstance(tree, str) else ["now"]
        for _, side in measure.alternated(rounds, sides):
            got[side].append(_parts(n, None if side == "now" else tree))
    alt = f"before issue 43 ({measure.BEFORE_ISSUE_43})"
    cmd = f"python bench/supervisor_parts.py {n}"
    how = (f"median of {rounds} alternated run(s) of each, CPU time of the supervisor's thread in one process; "
           f"a real Run with its rooms and files, {n} workers' processes that sleep")

    def med(side: str, key: str):
        return measure.median([g[key] for g in got[side]])

    rows = []
    for key, what, unit, note in (
            ("frame_us", "a report frame, from its bytes to the worker's row and its report event", "µs",
             "decode, the batch's checks, the ledger (8 folded reports: step, loss, trend, curve), the report "
             "event written (at 256 ranks every frame writes one)"),
            ("tick_us", f"a tick of the serve loop, {n} workers running", "µs",
             "the exit path, the ledger's held reports, control's pushes, stalls, stragglers, resize, the "
             "end check; 10 ticks a second"),
            ("sample_ms", f"a sample of {n} workers' processes", "ms",
             "psutil over each worker and its children, the process table's scan apart (next row); every 4 s "
             "past 128 workers (every 2 s before)"),
            ("scan_ms", "a scan of the process table for new descendants", "ms",
             "every process's parent (psutil): at every sample before; past 128 workers, at every other "
             "sample now (every 8 s)"),
            ("status_ms", f"a status of {n} ranks, as the TUI asks for it", "ms",
             "built under the run's lock and encoded as the control socket sends it (12 loss points a rank)")):
        rows.append(row(f"Supervisor at {n} ranks: {what}, CPU", cmd, med("now", key),
                        med("before", key) if got["before"] else None, alt_name=alt if got["before"] else None,
                        unit=unit, note=f"{note}; {how}"))
    return rows


def run(quick: bool = False) -> list[dict]:
    window = 2.0 if quick else 10.0
    if quick:
        return size_rows(8, window, 1, measure.BEFORE_ISSUE_43, None) + parts_rows(32, 1)
    return (size_rows(64, window, 3, measure.BEFORE_ISSUE_13, TARGET_PCT)
            + size_rows(256, window, 3, measure.BEFORE_ISSUE_43, TARGET_256_PCT)
            + parts_rows(256, 3))
