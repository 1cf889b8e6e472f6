"""report() cost per call, outside mpwatch (a no-op) and under mpwatch (inside a real
worker of a real headless run, which prints its own measurement).

The worker times a tight loop of `mpwatch.report(step=i, loss=0.5)` against the same loop
doing nothing and prints the difference per call. Under mpwatch the sender thread runs
meanwhile (it batches, encodes and ships every 50 ms, and competes for the GIL), and the
loop outruns the buffer, so the figure includes the drop path: the worst case a training
loop can hit, not the typical one.
"""
from __future__ import annotations

import contextlib
import json

from bench import measure
from bench.harness import row

TARGET_US = 2.0
OUTSIDE_TARGET_US = 1.0
MARK = "MPWATCH_BENCH_REPORT "

TIMER = r'''
import json, os, sys, time
kind, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if kind == "tensor":
    import torch
    loss = torch.tensor(0.5)
else:
    loss = 0.5
import mpwatch

report = mpwatch.report
wall, cpu = time.perf_counter_ns, time.process_time_ns  # cpu: every thread of this process

def empty(n):
    t, c = wall(), cpu()
    for i in range(n):
        pass
    return wall() - t, cpu() - c

def calls(n):
    t, c = wall(), cpu()
    for i in range(n):
        report(step=i, loss=loss)
    return wall() - t, cpu() - c

report(step=-1, loss=loss)  # starts the sender and connects, as a first step would
time.sleep(0.3)
per_wall, per_cpu = [], []
for _ in range(reps):
    ew, ec = empty(n)
    cw, cc = calls(n)
    per_wall.append(max(0, cw - ew) / n / 1000.0)
    per_cpu.append(max(0, cc - ec) / n / 1000.0)
per_wall.sort()
per_cpu.sort()
print("%s%s" % (os.environ.get("MARK", ""), json.dumps(
    {"active": mpwatch.active(), "wall_us": per_wall[len(per_wall) // 2], "cpu_us": per_cpu[len(per_cpu) // 2]})),
    flush=True)
'''


def _parse(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"the timing script printed no result: {text[-300:]!r}")


def outside(dir, script, kind, n, reps) -> dict:
    import subprocess

    cmd = [measure.sys.executable, str(script), kind, str(n), str(reps)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=measure.clean_env(MARK=MARK))
    out = _parse(res.stdout)
    if out["active"]:
        raise RuntimeError("the outside-mpwatch timing ran with a channel")
    return out


def under(dir, script, kind, n, reps, name, tree=None) -> dict:
    """Timed under mpwatch; `tree`: under the mpwatch of that folder (measure.tree_at)."""
    env = measure.clean_env(MARK=MARK, **({"PYTHONPATH": tree} if tree else {}))
    with measure.Headless(dir, script, kind, n, reps, n=1, name=name, env=env) as h:
        rc = h.wait(timeout=300)
        text = (h.run_dir / "rank-0" / "stdout.log").read_text(errors="replace")
        if rc != 0:
            raise RuntimeError(f"mpwatch exited {rc}: {h.stderr_tail()}")
    out = _parse(text)
    if not out["active"]:
        raise RuntimeError("the worker did not see an mpwatch channel")
    return out


def measure_kind(kind: str, n: int, reps: int, rounds: int, before: bool = False):
    """Medians of per-call µs (outside, under, and under the mpwatch before issue 13 when
    `before`: None where there is none), the runs alternated each round."""
    results: dict[str, list[dict]] = {"outside": [], "under": [], "before": []}
    at = measure.tree_at(measure.BEFORE_ISSUE_13) if before else contextlib.nullcontext("not asked")
    with measure.scratch("report") as d, at as tree:
        script = measure.write_script(d, "report_timer.py", TIMER)
        sides = ["under", "outside"] + ([] if isinstance(tree, str) else ["before"])
        for i, side in measure.alternated(rounds, sides):
            if side == "outside":
                results[side].append(outside(d, script, kind, n, reps))
            else:
                results[side].append(under(d, script, kind, n, reps, name=f"{kind}-{side}-{i}",
                                           tree=tree if side == "before" else None))
        cmd_under = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "1", "report_timer.py",
                                   kind, str(n), str(reps)])

    def med(side, key):
        return measure.median([r[key] for r in results[side]])

    return ({"cpu": med("under", "cpu_us"), "wall": med("under", "wall_us")},
            {"cpu": med("outside", "cpu_us"), "wall": med("outside", "wall_us")}, cmd_under,
            {"cpu": med("before", "cpu_us"), "wall": med("before", "wall_us")})


def run(quick: bool = False) -> list[dict]:
    n, reps, rounds = (20_000, 3, 1) if quick else (500_000, 7, 3)
    under_us, outside_us, cmd, before_us = measure_kind("float", n, reps, rounds, before=not quick)
    how = (f"median of {rounds} run(s) x {reps} loops of {n} calls, minus an empty loop; CPU time of the whole "
           "worker process, so the sender thread's batching and encoding are included; the loop outruns the "
           "2048-report buffer, so the drop path is too")
    rows = [
        row("report() per call, under mpwatch (float loss), CPU", cmd, under_us["cpu"], outside_us["cpu"],
            alt_name="outside mpwatch", unit="µs", target=f"≤ {TARGET_US:g} µs under mpwatch",
            ok=under_us["cpu"] <= TARGET_US, note=how),
        row("report() per call, under mpwatch (float loss), wall clock", cmd, under_us["wall"], outside_us["wall"],
            alt_name="outside mpwatch", unit="µs",
            note="the same loops by the wall clock: adds time the worker waits for the GIL or a CPU (the "
                 "supervisor and anything else running on the box compete with it)"),
        row("report() per call, outside mpwatch (no-op), CPU", f"python report_timer.py float {n} {reps}",
            outside_us["cpu"], unit="µs", target=f"< {OUTSIDE_TARGET_US:g} µs",
            ok=outside_us["cpu"] < OUTSIDE_TARGET_US,
            note=f"the same script run with plain python: report() is a no-op (wall clock "
                 f"{outside_us['wall']:.3g} µs)"),
    ]
    if before_us["cpu"] is not None:
        rows.append(row("report() per call, under mpwatch (float loss), CPU, against the code before issue 13", cmd,
                        under_us["cpu"], before_us["cpu"], alt_name=f"before issue 13 ({measure.BEFORE_ISSUE_13})",
                        unit="µs", note=f"the same loops, alternated with runs under the worker side and supervisor "
                                        f"before the redesign; wall clock {under_us['wall']:.3g} µs now, "
                                        f"{before_us['wall']:.3g} µs before"))
    if not quick:
        try:
            t_under, t_outside, t_cmd, _ = measure_kind("tensor", n // 2, reps, rounds)
        except Exception as exc:  # noqa: BLE001 - keep the float rows whatever happens here
            rows.append(row("report() per call, under mpwatch (0-d tensor loss), CPU",
                            note=f"failed: {type(exc).__name__}: {exc}"[:300]))
            return rows
        rows.append(row("report() per call, under mpwatch (0-d tensor loss), CPU", t_cmd, t_under["cpu"],
                        t_outside["cpu"], alt_name="outside mpwatch", unit="µs",
                        note=f"informational: includes loss.detach() (torch's own cost) on the loop and float() "
                             f"on the sender thread; wall clock {t_under['wall']:.3g} µs under, "
                             f"{t_outside['wall']:.3g} µs outside"))
    return rows
