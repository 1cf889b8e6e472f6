"""Stalls: how soon a hung worker's stacks are on disk, and what a dump costs the worker.

1. Latency: a worker reports every 20 ms, then blocks in time.sleep. From the stall
   deadline (its last report + --stall-timeout) to (a) the `stalled` event, (b) the
   stack file with the Python stacks on disk (polled every 2 ms), (c) the `dump` event.
   torchrun has no equivalent: it never shows a hung rank's stack.
2. Cost to the worker: a worker runs a tight loop and records every gap between two
   iterations; the bench dumps it repeatedly and compares the largest gap inside each dump's
   time window with the largest gap in equal windows without a dump. The same for
   `py-spy dump` (it pauses the process to read it) and `py-spy dump --native`.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench import measure
from bench.harness import row
from mpwatch.probes import pyspy, stacks
from mpwatch.supervisor import spawn

STALL_TIMEOUT = 1.5

STALLER = r'''
import time
import mpwatch

def stuck():
    time.sleep(3600)

for step in range(40):
    time.sleep(0.02)
    mpwatch.report(step=step, loss=1.0)
stuck()
'''

# Records gaps over 0.2 ms between loop iterations (CLOCK_MONOTONIC is shared with the bench).
LOOPER = r'''
import json, os, sys, time
out, seconds = sys.argv[1], float(sys.argv[2])
def work():
    return sum(range(200))
gaps = []
t_end = time.monotonic() + seconds
last = time.monotonic()
open(out + ".ready", "w").close()
n = 0
while last < t_end:
    n += 1
    if n % 1000 == 0 and os.path.exists(out + ".stop"):
        break
    work()
    now = time.monotonic()
    if now - last > 0.0002:
        gaps.append((last, now - last))
    last = now
with open(out, "w") as f:
    json.dump(gaps, f)
'''


# The work the SIGUSR1 handler does, timed in-process: faulthandler's C dump of all threads.
HANDLER = r'''
import faulthandler, json, sys, threading, time
ev = threading.Event()
threading.Thread(target=ev.wait, daemon=True).start()  # a second thread, like the sender
times = []
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter()
        faulthandler.dump_traceback(file=f, all_threads=True)
        times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps(times[len(times) // 2]))
'''


def _handler_cost(d: Path, n: int) -> float:
    res = subprocess.run([sys.executable, "-c", HANDLER, str(d / "handler.out"), str(n)], capture_output=True,
                         text=True, timeout=120, env=measure.clean_env())
    return json.loads(res.stdout) * 1e6


def _latency_once(d: Path, script: Path, i: int) -> dict:
    with measure.Headless(d, script, n=1, opts=["--stall-timeout", STALL_TIMEOUT], name=f"lat-{i}",
                          env=measure.clean_env(MPWATCH_PYSPY="off")) as h:
        stacks_dir = h.run_dir / "rank-0" / "stacks"
        seen = None
        deadline = time.monotonic() + 120
        while seen is None and time.monotonic() < deadline:
            for f in stacks_dir.glob("*.txt") if stacks_dir.exists() else ():
                try:
                    if "most recent call first" in f.read_text(errors="replace"):
                        seen = time.time()
                except OSError:
                    pass
            time.sleep(0.002)
        if seen is None:
            raise RuntimeError("no stack file within 120 s")
        measure.wait_for(lambda: h.events("dump"), 30, what="the dump event")
        last = max(r["ts"] for r in h.events("report"))
        dl = last + STALL_TIMEOUT
        return {"stalled": h.events("stalled")[0]["ts"] - dl, "file": seen - dl,
                "event": h.events("dump")[0]["ts"] - dl}


def _spawn_looper(d: Path, name: str, seconds: float):
    out = d / f"{name}.json"
    stack_file = d / f"{name}.fh"
    env = measure.clean_env(MPWATCH_STACK_FILE=str(stack_file), PYTHONPATH=spawn.INJECT_DIR)
    p = subprocess.Popen([sys.executable, "-c", LOOPER, str(out), str(seconds)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    measure.wait_for(lambda: Path(str(out) + ".ready").exists(), 60, what="the loop to start")
    return p, out, stack_file


def _worst_gap(gaps, t0, t1) -> float:
    return max([g for t, g in gaps if t0 - 0.001 <= t + g and t <= t1] or [0.0])


def _cost(d: Path, how: str, dumps: int) -> tuple[float | None, float | None, str]:
    """(median worst gap in dump windows, the same in quiet windows, note), in ms."""
    p, out, stack_file = _spawn_looper(d, how, 600.0)  # runs until told to stop
    windows = []
    note = ""
    try:
        time.sleep(0.3)
        for i in range(dumps):
            t0 = time.monotonic()
            if how == "faulthandler":
                stacks.capture([p.pid], stack_file, d / f"dump-{i}.txt", label="(bench)")
            else:
                ok, text = pyspy.dump(p.pid, native=how == "py-spy-native")
                if not ok:
                    note = text
            t1 = time.monotonic()
            windows.append((t0, t1))
            time.sleep(0.2 + 2 * (t1 - t0))  # room for a quiet window of the same length
        Path(str(out) + ".stop").touch()
        p.wait(timeout=60)
        gaps = json.loads(out.read_text())
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    in_dump = [_worst_gap(gaps, a, b) for a, b in windows]
    quiet = [_worst_gap(gaps, b + 0.1, b + 0.1 + (b - a)) for a, b in windows]  # right after each dump
    return measure.median(in_dump) * 1000, measure.median(quiet) * 1000, note


def run(quick: bool = False) -> list[dict]:
    reps, dumps = (2, 5) if quick else (5, 15)
    rows = []
    with measure.scratch("stall") as d:
        script = measure.write_script(d, "staller.py", STALLER)
        lat = [_latency_once(d, script, i) for i in range(reps)]
        med = {k: measure.median([x[k] for x in lat]) for k in ("stalled", "file", "event")}
        cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "--stall-timeout", str(STALL_TIMEOUT),
                             "staller.py"])
        rows.append(row("Stall: deadline to the `stalled` event", cmd, med["stalled"],
                        alt_name="torchrun: no stall detection", unit="s", target="< 0.5 s",
                        ok=med["stalled"] < 0.5,
                        note=f"median of {reps}; the deadline is the worker's last report + the timeout, "
                             "so it includes the sender's 0.25 s flush interval and the 0.1 s tick"))
        rows.append(row("Stall: deadline to the Python stacks on disk", cmd, med["file"],
                        alt_name="torchrun: never dumps a hung rank", unit="s", target="< 1 s",
                        ok=med["file"] < 1.0, note=f"median of {reps}; stack file polled every 2 ms"))
        rows.append(row("Stall: deadline to the `dump` event (with where it is stuck)", cmd, med["event"],
                        unit="s", target="< 1 s", ok=med["event"] < 1.0, note=f"median of {reps}"))

        us = _handler_cost(d, 50 if quick else 500)
        rows.append(row("Dump cost: the worker's SIGUSR1 handler (faulthandler, all threads)",
                        "python -c 'faulthandler.dump_traceback(all_threads=True)'", us, unit="us",
                        target="< 1000 us", ok=us < 1000,
                        note="median, timed in-process: the same C function the handler runs; "
                             "the worker runs on as soon as it returns"))
        fh_in, fh_quiet, _ = _cost(d, "faulthandler", dumps)
        note_pyspy = ""
        if pyspy.find():
            ps_in, ps_quiet, note_pyspy = _cost(d, "py-spy", dumps)
            pn_in, pn_quiet, note_native = _cost(d, "py-spy-native", dumps)
        else:
            ps_in = pn_in = ps_quiet = pn_quiet = None
            note_pyspy = note_native = "py-spy not installed"
        rows.append(row("Dump cost: worst pause of the worker during a dump", "mpwatch ctl dump RANK (SIGUSR1)",
                        fh_in, ps_in, alt_name="py-spy dump --pid", unit="ms",
                        note=f"median over {dumps} dumps of the longest gap between loop iterations; "
                             "scheduler noise on a shared box sets the floor: "
                             f"the same in quiet windows: {fh_quiet:.2f} ms (mpwatch run), "
                             + (f"{ps_quiet:.2f} ms (py-spy run)" if ps_quiet is not None else "-")
                             + (f"; {note_pyspy}" if note_pyspy else "")))
        rows.append(row("Dump cost: the same against py-spy --native", "mpwatch ctl dump RANK (SIGUSR1)",
                        fh_in, pn_in, alt_name="py-spy dump --native --pid", unit="ms",
                        note=(f"quiet windows: {pn_quiet:.2f} ms" if pn_quiet is not None else "")
                        + (f"; {note_native}" if note_native else "")))
    return rows


if __name__ == "__main__":
    from bench.harness import print_table

    print_table(run(quick="--quick" in sys.argv))
