"""The straggler finding (issue 32) on real runs: `mpwatch --headless -n 3` of an unmodified gloo
DDP loop (tests/fixtures/ddp_pace.py) on this machine.

- its time to appear: one rank made the straggler from its first step (a slow forward, or a slow
  Dataset), the time from the ranks' first report to the finding's alert; median of a few runs;
- its silence: a balanced run left for 10 minutes (rank 0 saves a checkpoint every 2 minutes,
  taking 3 s; every rank evaluates 40 batches every 500 steps, then all-reduces; start-up; this
  shared machine's noise): the straggler alerts it made (none wanted) and the highest score any
  rank reached, from the paces its statuses carried every 5 s (contract.straggler.scores: the
  share of a step the others lose; the finding needs 0.25).
"""
from __future__ import annotations

import statistics
import time

from bench import measure
from bench.harness import ROOT, row
from mpwatch.contract import straggler

DDP = ROOT / "tests" / "fixtures" / "ddp_pace.py"
SLOW = {"forward": ("--slow-forward", "0.2"), "data": ("--slow-data", "0.15")}
BALANCED = ("--checkpoint-every", "120", "--checkpoint-s", "3", "--eval-every", "500", "--eval-batches", "40")
FINDING_S = 120.0


def _appear(d, phase: str, i: int) -> float:
    """Seconds from the ranks' first report to the straggler alert naming rank 1 and `phase`."""
    flag, secs = SLOW[phase]
    with measure.Headless(d, DDP, "--slow-rank", "1", flag, secs, n=3, name=f"appear-{phase}-{i}") as h:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            evs = h.events()
            first = next((e["ts"] for e in evs if e["event"] == "report"), None)
            named = next((e["ts"] for e in evs if e["event"] == "alert" and e.get("kind") == "straggler"
                          and e.get("rank") == 1 and (e.get("straggler") or {}).get("phase") == phase), None)
            if first is not None and named is not None:
                return named - first
            if h.proc.poll() is not None:
                raise RuntimeError(f"mpwatch exited early: {h.stderr_tail()}")
            time.sleep(0.5)
    raise RuntimeError(f"no straggler finding on rank 1's {phase} within 300 s")


def appear_rows(d, phases: tuple[str, ...], runs: int) -> list[dict]:
    out = []
    for phase in phases:
        took = [_appear(d, phase, i) for i in range(runs)]
        flag, secs = SLOW[phase]
        cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "3", "ddp_pace.py", "--slow-rank", "1",
                             flag, secs])
        out.append(row(f"Straggler finding: time to appear (3 ranks of gloo DDP, rank 1's {phase} "
                       f"{secs} s slower)", cmd, round(statistics.median(took), 1), unit="s",
                       target="≤ 60 s", ok=statistics.median(took) <= 60,
                       note=f"from the ranks' first report (events.jsonl) to the alert naming rank 1 and its "
                            f"{phase}; median of {runs} runs ({min(took):.1f}-{max(took):.1f} s): a pace needs 6 "
                            "stretches of >= 5 steps and 1 s, then the score holds 8 s"))
    return out


def silence_row(d, minutes: float) -> dict:
    """A balanced run of `minutes`: the straggler alerts it made and the highest score seen."""
    top, polls = 0.0, 0
    with measure.Headless(d, DDP, *BALANCED, n=3, name="balanced") as h:
        end = time.monotonic() + 60 * minutes
        while time.monotonic() < end:
            if h.proc.poll() is not None:
                raise RuntimeError(f"mpwatch exited early: {h.stderr_tail()}")
            st = h.status()
            paces = {w["rank"]: w["pace"] for w in st["workers"] if w["pace"] is not None}
            top = max([top, *(s.share for s in straggler.scores(paces).values())])
            polls += 1
            time.sleep(5.0)
        alerts = [e for e in h.events("alert") if e.get("kind") == "straggler"]
        steps = max((e.get("step") or 0) for e in h.events("report"))
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "3", "ddp_pace.py", *BALANCED])
    return row(f"Straggler finding: none in a balanced 3-rank run of {minutes:g} minutes", cmd, len(alerts),
               unit="findings", target="0", ok=not alerts,
               note=f"{steps} steps of gloo DDP; rank 0 saves a checkpoint every 2 min (3 s each), every rank "
                    f"evaluates 40 batches every 500 steps then all-reduces; the highest score any rank reached "
                    f"in {polls} statuses 5 s apart: {top:.3f} (the finding needs {straggler.APPEAR:g} held "
                    f"{straggler.SCORE_HOLD_S:g} s)")


def run(quick: bool = False) -> list[dict]:
    phases, runs, minutes = (("data",), 1, 1.0) if quick else (("forward", "data"), 3, 10.0)
    with measure.scratch("straggler") as d:
        rows = appear_rows(d, phases, runs)
        rows.append(silence_row(d, minutes))
    return rows
