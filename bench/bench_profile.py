"""What a profile on demand costs the run it profiles (issue 32), side by side in alternated runs
of one unmodified torch loop under `mpwatch --headless -n 1`: one profiled with `ctl profile 0
--steps N --at-step S`, one not. The loop times its own steps (the wall clock after each
optimizer step); each window of steps is compared with the same steps of the run without:

- before: the steps before S (nothing asked yet: the two runs should agree);
- during: the N steps torch.profiler records (every operator is recorded);
- export: the steps after the profiler stopped until the trace was written (the export, the
  gzip and the operators' table run on a thread of the worker's own, beside the loop);
- after: as many steps after that.

And what the loop waited for on its own thread (the profiler's start and stop: `held_ms`, as
the worker measured it), and the trace's size.
"""
from __future__ import annotations

import json
import statistics

from bench import measure
from bench.harness import row

LOOP = r'''
import json, sys, time
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
steps, out = int(sys.argv[1]), sys.argv[2]
net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                          torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
ends = []
for step in range(steps):
    loss = torch.nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()  # mpwatch counts the step here: a profile starts and stops at this boundary
    ends.append([time.perf_counter(), time.time()])
    time.sleep(0.001)
json.dump(ends, open(out, "w"))
'''


LABEL = {"before": "before it", "during": "while it records", "export": "while its trace is written",
         "after": "after it"}


def _rate(ends: list[list[float]], a: int, b: int) -> float:
    """Steps per second over steps a+1..b (the wall clock between their ends)."""
    a, b = max(0, a), min(b, len(ends) - 1)
    return (b - a) / (ends[b][0] - ends[a][0])


def _once(d, script, side: str, i: int | str, steps: int, at: int, n: int) -> dict:
    out = d / f"{side}-{i}.json"
    with measure.Headless(d, script, steps, out, n=1, name=f"{side}-{i}") as h:
        info: dict = {}
        if side == "profiled":
            measure.wait_for(lambda: any((w["step"] or 0) >= 3 for w in h.status()["workers"]), 300,
                             what="steps")
            h.client().ask("profile", 0, at, "bench", steps=n)
            written = measure.wait_for(lambda: h.events("profile_written"), 300, what="the trace")[0]
            info = {"held_ms": written["held_ms"], "bytes": written["bytes"], "written_ts": written["ts"],
                    "started": h.events("profile_started")[0]["step"]}
        rc = h.wait(timeout=600)
        if rc != 0:
            raise RuntimeError(f"mpwatch exited {rc}: {h.stderr_tail()}")
    info["ends"] = json.loads(out.read_text())
    return info


def _windows(p: dict, steps: int, n: int, span: int) -> dict[str, tuple[int, int]]:
    s, ends = p["started"], p["ends"]
    written = next((k for k, e in enumerate(ends) if e[1] >= p["written_ts"]), steps - 1)
    return {"before": (s - span, s), "during": (s, s + n), "export": (s + n, max(written, s + n + 1)),
            "after": (max(written, s + n + 1), max(written, s + n + 1) + span)}


def run(quick: bool = False) -> list[dict]:
    rounds, steps, at, n, span = (2, 500, 250, 5, 40) if quick else (5, 900, 450, 10, 100)
    with measure.scratch("profile") as d:
        script = measure.write_script(d, "loop.py", LOOP)
        _once(d, script, "plain", "warm-up", 60, at, n)  # torch's files in the page cache
        runs: dict[tuple[int, str], dict] = {}
        for i, side in measure.alternated(rounds, ["profiled", "plain"]):
            runs[i, side] = _once(d, script, side, i, steps, at, n)
        pairs = [(runs[i, "profiled"], runs[i, "plain"]) for i in range(rounds)]
    cmd = (measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "1", "loop.py", str(steps), "out.json"])
           + f"; mpwatch ctl profile 0 --steps {n} --at-step {at}")
    rows = []
    for name in ("before", "during", "export", "after"):
        on, off, ratios = [], [], []
        for p, q in pairs:
            a, b = _windows(p, steps, n, span)[name]
            on.append(_rate(p["ends"], a, b))
            off.append(_rate(q["ends"], a, b))
            ratios.append(on[-1] / off[-1])
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        note = f"median of {rounds} alternated pairs' ratios ({spread}); " + _what(name, n, span)
        med_on, med_off = round(statistics.median(on), 1), round(statistics.median(off), 1)
        rows.append(row(f"A profile's cost to the run: steps/s {LABEL[name]}", cmd, med_on, med_off,
                        alt_name="no profile", unit="steps/s", ratio=statistics.median(ratios), note=note))
    held = [p["held_ms"] for p, _ in pairs]
    size = statistics.median(p["bytes"] for p, _ in pairs)
    note = (f"as the worker timed it (held_ms), {min(held):.1f}-{max(held):.1f} ms over {rounds} profiles of "
            f"{n} steps; the export (a {size / 1024:.0f} KiB gzipped trace), the gzip and the operators' "
            "table run on the worker's own thread (the export row)")
    rows.append(row("A profile's cost to the run: the training thread held by the profiler's start and stop",
                    cmd, round(statistics.median(held), 1), unit="ms", note=note))
    return rows


def _what(name: str, n: int, span: int) -> str:
    return {"before": f"the {span} steps before the profile starts: nothing asked yet (the runs' noise)",
            "during": f"the {n} steps torch.profiler records (CPU activities: every operator)",
            "export": "from the profiler's stop to the trace written: export, gzip and key_averages on the "
                      "worker's thread beside the loop",
            "after": f"the {span} steps after the trace is written"}[name]
