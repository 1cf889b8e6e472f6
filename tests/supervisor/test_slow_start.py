"""Start-up is not a stall (issue 20, item 1): under a real `mpwatch --headless`, a worker that
takes longer than --stall-timeout before its first report is never `stalled`; past
--startup-timeout it is a slow start, said once and dumped once, and it goes on."""
import json
import os

from tests.helpers import FIXTURES, mpwatch, wait_for

SLOW = FIXTURES / "slow_start.py"


def start_up_stalls(events: list[dict]) -> list[dict]:
    """The stalls the start-up was called: those whose silence began before the rank's first
    report (the stall clock judging the start). A stall between two reports can only be the
    box starving a worker that reports every few ms past the stall timeout (it happened at a
    load of 20-34 on 2 cores): another rule (tests/supervisor/test_stall.py), not this one."""
    first = {}
    for e in events:
        if e["event"] == "report":
            first.setdefault(e["rank"], e["ts"])
    return [e for e in events if e["event"] == "stalled"
            and (e["step"] is None or e["ts"] - e["silent_for"] < first.get(e["rank"], float("inf")) - 0.5)]


def test_a_start_longer_than_the_stall_timeout_is_not_a_stall(headless):
    # The case: 8 s before the first report with --stall-timeout 3 (the default
    # start-up limit, 600 s, is far away): no stall, no slow start, no dump of either.
    run = headless(SLOW, n=2, opts=["--stall-timeout", "3"], env=dict(os.environ, SLOW_S="8", STEPS="20"))
    assert run.wait_exit(120) == 0
    events = run.events()
    names = [e["event"] for e in events]
    assert "report" in names and not start_up_stalls(events), names
    dumps = [e["reason"] for e in events if e["event"] == "dump"]
    assert "slow_start" not in names and dumps == ["stall"] * names.count("stalled"), names  # a later stall's
    s = json.loads(mpwatch("summary", run.run_dir, "--json").stdout)
    assert all(x["step"] is not None for x in s["stalls"]) and s["slow_starts"] == []


def test_no_first_report_within_the_startup_timeout_is_a_slow_start_said_and_dumped_once(headless):
    run = headless(SLOW, n=1, opts=["--stall-timeout", "2", "--startup-timeout", "3"],
                   env=dict(os.environ, SLOW_S="10", STEPS="1000", SLEEP="0.02"))
    ev = run.wait_event("slow_start", timeout=60)[0]
    assert ev["rank"] == 0 and ev["limit"] == 3.0 and ev["silent_for"] >= 3.0
    assert ev["kind"] == "blocked", ev
    dump = run.wait_event("dump", lambda r: r["reason"] == "slow start", timeout=60)[0]
    assert dump["where"].startswith("load_data (slow_start.py:"), dump
    w = wait_for(lambda: (lambda w: w if (w["slow_start"] or {}).get("where") else None)(run.worker(0)), 60,
                 what="the slow start's frame in the status")
    assert w["state"] == "running" and w["stall"] is None
    assert w["slow_start"]["limit"] == 3.0 and w["slow_start"]["where"].startswith("load_data (")
    human = run.ctl("status").stdout
    assert "slow start: no first report after 3.0s" in human and "     in load_data (slow_start.py:" in human
    assert "rank 0 slow start: no first report after 3.0s; blocked: " in run.stderr_text
    # Then it reports: the slow start is over, and it was never called stalled.
    wait_for(lambda: (run.worker(0)["step"] or 0) > 50, 60, what="reports after the slow start")
    assert run.worker(0)["slow_start"] is None
    assert len(run.events("slow_start")) == 1 and not start_up_stalls(run.events())
    assert [d["reason"] for d in run.events("dump") if d["reason"] != "stall"] == ["slow start"]
    run.ctl("stop")
    run.wait_exit(60)
    s = json.loads(mpwatch("summary", run.run_dir, "--json").stdout)
    assert [x["rank"] for x in s["slow_starts"]] == [0] and all(x["step"] is not None for x in s["stalls"])
    assert s["slow_starts"][0]["where"].startswith("load_data (slow_start.py:")
    text = mpwatch("summary", run.run_dir).stdout
    assert "slow starts (no first report within --startup-timeout; never called stalled):" in text


def test_a_slow_start_ends_at_a_childs_first_report(headless):
    """A rank that trains in forked children (Hogwild) and never reports itself: its slow start is
    said once, and over as soon as a child reports (supervisor.workers.ledger); never a stall."""
    run = headless(SLOW, n=1, opts=["--stall-timeout", "2", "--startup-timeout", "3"],
                   env=dict(os.environ, SLOW_S="8", STEPS="1000", SLEEP="0.02", CHILDREN="2"))
    ev = run.wait_event("slow_start", timeout=60)[0]
    assert ev["rank"] == 0 and ev["limit"] == 3.0, ev
    w = wait_for(lambda: (lambda w: w if w["slow_start"] else None)(run.worker(0)), 60,
                 what="the slow start in the status")
    assert w["slow_start"]["limit"] == 3.0 and w["stall"] is None, w

    def a_child_reports():
        w = run.worker(0)
        return w if any(c["reporting"] and c["step"] is not None for c in w["children"]) else None
    w = wait_for(a_child_reports, 60, what="a child's first report")
    assert w["slow_start"] is None and w["stall"] is None, w
    wait_for(lambda: all((c["step"] or 0) > 20 for c in run.worker(0)["children"] if c["reporting"]), 60,
             what="the children's steps")
    assert len(run.events("slow_start")) == 1 and not run.events("stalled")
    assert run.worker(0)["slow_start"] is None
    run.ctl("stop")
    run.wait_exit(60)
