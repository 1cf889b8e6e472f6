"""Phase times recorded from real runs, for the straggler rule's tests (tests/supervisor/
test_straggler_rule.py feeds them to contract.pace and contract.straggler as the supervisor does)
and the slowdown rule's (tests/supervisor/test_slowdown_rule.py: contract.slowdown):

    PYTHONPATH=$PWD .venv/bin/python -m tests.record_pace [SCENARIO ...]   # all when none is named

Each scenario runs a real headless supervisor on real ranks (tests/fixtures/ddp_pace.py: an
unmodified DDP loop, its phases timed by the automatic steps; tests/fixtures/phases_sync.py:
mpwatch.phase() in the script) for its duration, then keeps from the run's events.jsonl each
rank's report events, the very samples contract.pace folds (the report's time, its step, the
process's phase totals), times counted from the run's start; and what each rank printed of its
own phase times (the scripts measure them themselves). Written to tests/data/pace/<scenario>.json.
A sample is [t, step, phases], and its `work` metric fourth where the script reports one. A scenario
may hold its ranks above the other jobs of this machine (`hold`), and take the machine from the run
for a while (`busy`: from, to; tests.helpers.TakenMachine).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mpwatch.rundir import reader
from tests.helpers import FIXTURES, ROOT, HeadlessRun, TakenMachine, wait_for

DATA = ROOT / "tests" / "data" / "pace"
DDP = FIXTURES / "ddp_pace.py"
PHASES = FIXTURES / "phases_sync.py"
CURRICULUM = FIXTURES / "ddp_curriculum.py"


class Scenario:
    def __init__(self, name: str, script: Path, args: tuple[str, ...], seconds: float, what: str, n: int = 3,
                 busy: tuple[float, float] | None = None, hold: bool = False):
        self.name = name
        self.script = script
        self.args = args
        self.seconds = seconds  # how long the run is recorded
        self.what = what
        self.n = n
        self.busy = busy  # busy processes beside the run: from, to (seconds from its start)
        # its ranks held above the other jobs of this machine once they step (tests.helpers.TakenMachine):
        # its recording is the scenario's, not this shared machine's noise (a busy scenario's always are)
        self.hold = hold or busy is not None


SCENARIOS = {s.name: s for s in [
    Scenario("slow_data", DDP, ("--slow-rank", "1", "--slow-data", "0.15"), 50,
             "rank 1's Dataset takes 0.15 s more a batch"),
    Scenario("slow_forward", DDP, ("--slow-rank", "1", "--slow-forward", "0.2"), 50,
             "rank 1's forward takes 0.2 s more"),
    Scenario("caught_up", DDP, ("--slow-rank", "2", "--slow-data", "0.15", "--slow-for", "35"), 100,
             "rank 2's Dataset takes 0.15 s more a batch for its first 35 s of steps, then no more"),
    Scenario("explicit", PHASES, ("--slow-rank", "2", "--slow-compute", "0.1"), 50,
             "mpwatch.phase() in the script; rank 2's compute takes 0.1 s more"),
    Scenario("balanced", DDP, ("--checkpoint-every", "20", "--checkpoint-s", "3", "--eval-every", "150",
                               "--eval-batches", "40"), 150,
             "every rank alike; rank 0 saves a checkpoint every 20 s (3 s each), all evaluate every 150 steps"),
    Scenario("balanced_workers", DDP, ("--loader-workers", "2", "--checkpoint-every", "30", "--checkpoint-s", "8",
                                       "--eval-every", "60", "--eval-batches", "30"), 120,
             "every rank alike, 2 DataLoader workers each; a long checkpoint save (8 s) every 30 s, "
             "an evaluation every 60 steps"),
    # issue 41: every rank alike, the run against its own best
    Scenario("data_slower", DDP, ("--data", "0.06", "--data-slower-after", "1000"), 300,
             "every rank's Dataset takes 60 ms a batch, then 3x as long from its 1000th batch on"),
    Scenario("busy", DDP, ("--data", "0.06", "--pace", "0", "--work", "256", "--frozen", "150"), 270,
             "every rank's forward is CPU work (a frozen backbone); the ranks on the last CPU above the other "
             "jobs, two busy processes there above them from 130 s to 200 s (tests.helpers.TakenMachine)",
             busy=(130, 200)),
    Scenario("warmup", DDP, ("--warmup", "45", "--warmup-extra", "0.06", "--checkpoint-every", "25",
                             "--checkpoint-s", "3", "--eval-every", "200", "--eval-batches", "60"), 170,
             "every forward 60 ms slower for the first 45 s of steps (warm-up, compilation); rank 0 saves a "
             "checkpoint every 25 s (3 s each), all evaluate every 200 steps"),
    Scenario("long_pauses", DDP, ("--checkpoint-every", "50", "--checkpoint-s", "15", "--eval-every", "700",
                                  "--eval-batches", "500"), 220,
             "every rank alike; rank 0 saves a checkpoint every 50 s taking 15 s (no rank steps meanwhile), all "
             "evaluate 500 batches every 700 steps", hold=True),
    Scenario("curriculum", CURRICULUM, ("--pace", "0.05", "--grow-every", "300", "--grow-by", "1.25"),
             240, "every 300 steps the step's sequence grows 1.25x and its forward with it; the script "
             "reports it: mpwatch.report(work=length)", hold=True),
]}


def samples(run_dir: Path, t0: float) -> tuple[dict[str, list[Any]], dict[str, list[float]]]:
    """Each rank's report events as [t, step, phases], and its starts, t from t0."""
    got: dict[str, list[Any]] = {}
    starts: dict[str, list[float]] = {}
    for e in reader.read_events(run_dir):
        r = e.get("rank")
        if r is None:
            continue
        if e["event"] == "worker_started":
            starts.setdefault(str(r), []).append(round(e["ts"] - t0, 3))
        elif e["event"] == "report" and "child_of" not in e:
            work = (e.get("metrics") or {}).get("work")
            got.setdefault(str(r), []).append([round(e["ts"] - t0, 4), e.get("step"), e.get("phases")]
                                              + ([work] if work is not None else []))
    return got, starts


def record(sc: Scenario, tmp: Path) -> dict[str, Any]:
    run = HeadlessRun(tmp, sc.script, *sc.args, n=sc.n, opts=["--stall-timeout", "120"], env=dict(os.environ))
    try:
        run.start()
        took = busy(sc, run)
        time.sleep(max(0.0, sc.seconds - took))  # the recording's length
        run.ctl("stop")
        run.wait_exit(60)
        t0 = json.loads((run.run_dir / "run.json").read_text())["started"]
        got, starts = samples(run.run_dir, t0)
        printed = {str(r): [ln for ln in run.log(r).splitlines() if ln.startswith(f"rank {r} step")]
                   for r in range(sc.n)}
        return {"scenario": sc.name, "recorded_with": f"python -m tests.record_pace {sc.name}", "what": sc.what,
                "script": sc.script.name, "args": list(sc.args), "ranks": sc.n, "samples": got, "starts": starts,
                "printed": printed}
    finally:
        run.cleanup()


def busy(sc: Scenario, run: HeadlessRun) -> float:
    """The scenario's ranks held once they step, and the machine taken from the run for its while
    (from its start, which just began): busy processes on their CPU from `start` to `end`. The
    seconds it took."""
    t0 = time.monotonic()
    if not sc.hold:
        return 0.0
    taken = TakenMachine()
    pids = wait_for(lambda: (lambda ws: [w["pid"] for w in ws] if len(ws) == sc.n and all(w["step"] for w in ws)
                             else None)(run.status()["workers"]), 150, what="every rank stepping")
    taken.hold(pids)
    if sc.busy is None:
        return time.monotonic() - t0
    start, end = sc.busy
    time.sleep(max(0.0, start - (time.monotonic() - t0)))
    procs = taken.start()
    try:
        time.sleep(end - start)
    finally:
        taken.stop(procs)
    return time.monotonic() - t0


def main(argv: list[str]) -> int:
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"record_pace: unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}",
              file=sys.stderr)
        return 2
    DATA.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"mpwatch-pace-{name}-") as tmp:
            data = record(SCENARIOS[name], Path(tmp))
        out = DATA / f"{name}.json"
        out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"recorded {out.relative_to(ROOT)} in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
