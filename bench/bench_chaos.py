"""The chaos bench (issue 39): beside two honest ranks, a hostile one, for BENCH_CHAOS_SECONDS
(600 by default, 20 with --quick): `mpwatch --headless -n 3 --max-restarts 100000 chaos.py`
(tests/fixtures/faults/chaos.py). The hostile rank sends bad frames on channels of its own
(undecodable, of the wrong shape, cut short, over the size limit), reports past the bounds,
declarations past them (20,000 phase names and 300 metric names a batch), hellos for another
rank; writes garbage to its stderr (escapes, 5000-digit NCCL and OOM numbers, tracebacks of 3000
frames, broken UTF-8) and random files and links into its rank folder; its attempts of 2-6 s
each end with a failure the supervisor judges from that stderr, and is restarted. The bench asks
a stack dump of it every 5 s (its faulthandler file holds its garbage too).

What it reads back: the supervisor lives through it all (its status every 2 s, its own exit by
the stop at the end); every bad input the hostile rank sent (its own tally, written at the end of
each attempt) is counted by the supervisor (bad frames, rejected reports, notes of inputs past
the bounds or refused, refused connections): the uncounted ones, target 0; the honest ranks'
numbers untouched: every report event of theirs holds the loss their step gives, and their last
step is the one they say; the rooms that failed and the handlers' faults (supervisor.log)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench import measure
from bench.harness import ROOT, row
from mpwatch.sources.local import ClientError

CHAOS = ROOT / "tests" / "fixtures" / "faults" / "chaos.py"
SECONDS, QUICK_SECONDS = 600, 20
SEED = 39
DUMP_EVERY_S = 5.0
POLL_S = 2.0


def _tally(d: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in d.glob("rank2-*.json"):
        for k, v in json.loads(f.read_text()).items():
            out[k] = out.get(k, 0) + v
    return out


def _drive(h: measure.Headless, seconds: float) -> dict[str, int]:
    """Polls the status and asks dumps of rank 2 for `seconds` (and its last attempt's end)."""
    seen = {"polls": 0, "dumps_asked": 0, "died": 0}
    end, next_dump = time.monotonic() + seconds + 8.0, 0.0
    while time.monotonic() < end:
        if h.proc.poll() is not None:
            seen["died"] = 1
            break
        h.status()
        seen["polls"] += 1
        if time.monotonic() >= next_dump:
            next_dump = time.monotonic() + DUMP_EVERY_S
            try:
                h.client().act("dump", 2)
                seen["dumps_asked"] += 1
            except ClientError:
                pass  # rank 2 between two attempts: not running, refused
        time.sleep(POLL_S)
    return seen


def _honest(h: measure.Headless, final: dict) -> tuple[int, int]:
    """(reports of ranks 0 and 1 whose loss is not their step's, ranks whose last step is not theirs)."""
    wrong = sum(1 for e in h.events("report") if e["rank"] in (0, 1) and e.get("child_of") is None
                and e.get("loss") != 1.0 / (e["step"] + 1) + e["rank"])
    ends = 0
    for w in final["workers"]:
        if w["rank"] in (0, 1):
            log = (h.run_dir / f"rank-{w['rank']}" / "stdout.log").read_text(errors="replace").split()
            said = int(log[log.index("LAST") + 1]) if "LAST" in log else None
            bad = w["bad_frames"] or w.get("rejected") or w.get("bad_inputs")
            ends += int(said is None or w["step"] != said or bool(bad))
    return wrong, ends


def _counted(final: dict, tally: dict[str, int]) -> tuple[int, str]:
    """The bad inputs rank 2 sent that the supervisor did not count, and the figures side by side."""
    w = next(x for x in final["workers"] if x["rank"] == 2)
    got = {"bad frames": w["bad_frames"], "rejected reports": (w.get("rejected") or {}).get("count", 0),
           "notes": (w.get("bad_inputs") or {}).get("count", 0),
           "refused connections": final["run"]["refused_connections"]}
    sent = {"bad frames": tally.get("bad", 0), "rejected reports": tally.get("rejected", 0),
            "notes": tally.get("phase_notes", 0) + tally.get("metric_notes", 0) + tally.get("refused", 0),
            "refused connections": tally.get("refused", 0)}
    uncounted = sum(max(0, sent[k] - got[k]) for k in sent)
    return uncounted, "; ".join(f"{k} {got[k]} counted of {sent[k]} sent" for k in sent)


def run(quick: bool = False) -> list[dict]:
    seconds = float(os.environ.get("BENCH_CHAOS_SECONDS") or (QUICK_SECONDS if quick else SECONDS))
    with measure.scratch("chaos") as d:
        tallies = d / "tallies"
        tallies.mkdir()
        args = (seconds, SEED, tallies)
        with measure.Headless(d, CHAOS, *args, n=3, opts=["--max-restarts", "100000"], name="chaos") as h:
            seen = _drive(h, seconds)
            alive = not seen["died"] and h.proc.poll() is None
            if alive:
                h.client().stop()
            code = h.wait(120)
            final = h.final()
            if final is None:
                return [row("Chaos", note=f"failed: no final.json (exit {code}): {h.stderr_tail()}")]
            tally = _tally(tallies)
            uncounted, figures = _counted(final, tally)
            wrong, ends = _honest(h, final)
            rooms = [e.get("room") for e in h.events("room_failed")]
            faults = (h.run_dir / "supervisor.log").read_text(errors="replace").count(" ERROR [")
            dumps = sum(1 for e in h.events("dump") if e["rank"] == 2)
            attempts = 1 + next(w["restarts"] for w in final["workers"] if w["rank"] == 2)
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "-n", "3", "--max-restarts", "100000", "chaos.py",
                         f"{seconds:g}", str(SEED), "TALLY_DIR"])
    sent = (f"rank 2 sent {tally.get('frames', 0)} bad frames and batches, {tally.get('refused', 0)} hellos for "
            f"another rank, {tally.get('stderr_lines', 0)} garbage stderr lines over {attempts} attempts (each "
            f"judged at its end), {tally.get('files', 0)} files and links into its folder")
    return [
        row(f"Chaos ({seconds:g} s of a hostile rank beside 2 honest ones): the supervisor lives", cmd, alive,
            target="alive", ok=alive,
            note=f"{sent}; {seen['polls']} statuses 2 s apart all answered, {dumps} of {seen['dumps_asked']} "
                 f"stack dumps asked of it taken; rooms failed: {rooms or 'none'}; faults in a handler "
                 f"(supervisor.log): {faults}; final.json written, exit code {code}"),
        row("Chaos: bad inputs the supervisor did not count", cmd, uncounted, unit="inputs", target="0",
            ok=uncounted == 0, note=figures),
        row("Chaos: the honest ranks' numbers touched", cmd, wrong + ends, unit="reports", target="0",
            ok=wrong + ends == 0,
            note=f"report events of ranks 0 and 1 whose loss is not 1/(step+1)+rank: {wrong}; ranks whose last "
                 f"step in final.json is not the one they said, or with a bad frame, rejection or note: {ends}"),
    ]


if __name__ == "__main__":
    import sys

    for r in run(quick="--quick" in sys.argv):
        print(json.dumps(r))
