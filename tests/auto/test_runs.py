"""Issue 21 through a real supervisor: scripts with no line of mpwatch's show their steps,
steps/s, loss, TIME split and hangs (`mpwatch --headless`, read with `ctl status --json` and the
run's events.jsonl); --no-auto and MPWATCH_AUTO=0 leave them as they were."""
from __future__ import annotations

import json

import pytest

from tests.auto.conftest import OPT_OUTS
from tests.helpers import FIXTURES, need, wait_for

need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
pytestmark = pytest.mark.torch

LOOP = FIXTURES / "auto_loop.py"
DDP = FIXTURES / "ddp_plain.py"


def test_an_unmodified_two_rank_script_shows_steps_rate_loss_and_time_split(headless, tmp_path):
    run = headless(LOOP, "--steps", 150, "--sleep", 0.05, "--out", tmp_path / "out-{rank}.json", n=2)
    ws = wait_for(lambda: (lambda s: s if all((w["step"] or 0) >= 20 and w["steps_per_s"] for w in s) else None)(
        run.status()["workers"]), 120, what="both ranks past step 20 with a rate")
    for w in ws:
        assert w["steps_from"] == "auto" and w["heartbeat"] == "ok"
        assert isinstance(w["loss"], float) and w["loss_tail"]
        assert all(w["phases"][p] > 0 for p in ("data", "forward", "backward", "optimizer")), w["phases"]
    assert run.wait_exit(180) == 0
    for rank in (0, 1):
        out = json.loads((tmp_path / f"out-{rank}.json").read_text())
        reports = [e for e in run.events("report") if e["rank"] == rank]
        assert reports and reports[-1]["step"] == 150
        for e in reports:  # each event is one step's exact (step, loss) pair
            assert e["loss"] == out["losses"][e["step"] - 1], e


@pytest.mark.parametrize("how", OPT_OUTS)
def test_opting_out_leaves_the_script_without_steps(opted_out, how):
    run = opted_out[how]  # tests/auto/conftest.py: auto_loop.py under `mpwatch --headless`, opted out
    assert run.code == 0 and not run.bugs, run.bugs
    assert not run.out["hooked"] and len(run.out["losses"]) == 25
    w = run.final["workers"][0]
    assert w["step"] is None and w["reports"] == 0
    assert w["heartbeat"] == "none"  # never said hello: nothing of mpwatch's was loaded with torch
    assert not run.reports


def test_a_long_evaluation_between_steps_is_no_stall(headless, tmp_path):
    run = headless(LOOP, "--steps", 10, "--eval-after", 5, "--eval-s", 9, "--out", tmp_path / "o.json", n=1,
                   opts=["--stall-timeout", "3"])
    assert run.wait_exit(180) == 0
    reports = run.events("report")
    assert reports[-1]["step"] == 10
    assert any(r["ts"] - reports[0]["ts"] > 5 and r["step"] == 5 for r in reports), "heartbeats at step 5"
    # The evaluation runs at step 5, after the first report. The 3 s may also pass before it
    # (torch's import under load: a stall from the start until issue 20's start-up rule; it is
    # judged as the first batch lands, so it may name step 5) and after the last step (torch's
    # teardown): neither is the evaluation. A stall's silence began at ts - silent_for.
    in_eval = [e for e in run.events("stalled")
               if e["step"] == 5 and e["ts"] - e["silent_for"] >= reports[0]["ts"]]
    # Heartbeats every 0.1 s against a 3 s stall timeout: a stall in the evaluation is mpwatch's
    # fault when the worker sent heartbeats during the silence it saw (their own times say so);
    # a worker that sent nothing for 3 s was starved by the box (load 20-34 on 2 cores did it).
    heard = [(e, [r["ts"] for r in reports if e["ts"] - e["silent_for"] + 0.5 < r["ts"] < e["ts"] - 0.5])
             for e in in_eval]
    assert not [(e, ts) for e, ts in heard if ts], "its DataLoader batches were heartbeats"


def test_the_tui_launcher_passes_no_auto_to_its_supervisor(tmp_path):
    from mpwatch.cli import args as cli_args

    ns = cli_args.run_parser().parse_args(["--no-auto", "train.py"])
    assert "--no-auto" in cli_args.relayed_flags(ns)
    assert "--no-auto" not in cli_args.relayed_flags(cli_args.run_parser().parse_args(["train.py"]))


def test_a_blocked_ddp_rank_is_named_without_a_report_anywhere(headless):
    assert "import mpwatch" not in DDP.read_text() and "report(" not in DDP.read_text()
    run = headless(DDP, "--hang-rank", 1, "--hang-step", 15, n=2, opts=["--stall-timeout", "3"])

    def named():
        s = run.status()
        by = {w["rank"]: w for w in s["workers"]}
        culprit = (s["straggler"] or {}).get("culprits")
        where = (by[1]["stall"] or {}).get("where") or ""
        if all(w["state"] == "stalled" for w in by.values()) and culprit and "wait_for_a_lost_message" in where:
            return s
        return None

    s = wait_for(named, 120, what="both ranks stalled, rank 1 named and where it waits")
    by = {w["rank"]: w for w in s["workers"]}
    assert by[0]["stall"]["step"] == 15 and by[1]["stall"]["step"] == 14
    assert by[0]["steps_from"] == by[1]["steps_from"] == "auto"
    assert s["straggler"]["culprits"] == [1] and s["straggler"]["waiting"] == [0]
    text = s["straggler"]["text"]
    assert "rank 1" in text and "step 14" in text and "wait_for_a_lost_message" in text, text


# The worker side says hello when mpwatch is imported, and mpwatch.worker.auto imports it right
# after `import torch`: from then on the process is one that will report, and its first optimizer
# step its first report.
def test_an_unmodified_script_slow_to_its_first_step_is_a_slow_start_never_a_stall(headless, tmp_path):
    script = tmp_path / "slow_first_step.py"
    script.write_text(
        "import runpy, sys, time\nimport torch\ntime.sleep(8)  # loading data before the first step\n"
        f"sys.argv = ['auto_loop.py', '--steps', '40', '--sleep', '0.05', '--out', {str(tmp_path / 'o.json')!r}]\n"
        f"runpy.run_path({str(LOOP)!r}, run_name='__main__')\n")
    run = headless(script, n=1, opts=["--stall-timeout", "6", "--startup-timeout", "3"])
    [slow] = run.wait_event("slow_start", timeout=60)
    assert slow["rank"] == 0 and slow["limit"] == 3.0, slow
    assert run.wait_exit(180) == 0
    reports = run.events("report")
    assert reports[0]["ts"] > slow["ts"] and reports[-1]["step"] == 40
    # The stall clock starts at the first optimizer step: no stall's silence began before it. (One
    # later, between two steps 0.05 s apart, is the box starving the worker past the 6 s: "busy:
    # spins 8% CPU" at a load of 20-34 on 2 cores. Not this rule.)
    early = [e for e in run.events("stalled")
             if e["step"] is None or e["ts"] - e["silent_for"] < reports[0]["ts"] - 0.5]
    assert not early, "the stall clock starts at the first optimizer step"
    assert len(run.events("slow_start")) == 1
