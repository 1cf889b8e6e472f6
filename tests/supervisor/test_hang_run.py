"""Hung workers under a real `mpwatch --headless`: detected, classified, dumped where they
are stuck, told apart from healthy and waiting ranks, and recovered. Real processes and
signals; every wait is for a condition with a generous deadline (a busy 2-core box)."""
import os
import signal

from tests.helpers import FIXTURES, wait_for

STUCK = {1: ("lock", "stuck_on_lock", "blocked"), 2: ("sleep", "stuck_in_sleep", "blocked"),
         3: ("spin", "stuck_spinning", "busy"), 4: ("pipe", "stuck_reading_pipe", "blocked"),
         5: ("child", "stuck_joining_child", "blocked")}


def test_stuck_workers_are_flagged_dumped_and_recover(headless):
    env = dict(os.environ, HANG_MODES="none,lock,sleep,spin,pipe,child", HANG_AFTER="3", RUN_S="300")
    run = headless(FIXTURES / "hang_modes.py", n=len(STUCK) + 1, opts=["--stall-timeout", "6"], env=env)
    stalled = run.wait_event("stalled", lambda r: r["rank"] in STUCK, timeout=120, count=len(STUCK))
    by_rank = {r["rank"]: r for r in stalled}
    assert set(by_rank) == set(STUCK)
    for rank, (mode, func, kind) in STUCK.items():
        assert by_rank[rank]["kind"] == kind, (mode, by_rank[rank])
        assert by_rank[rank]["step"] == 2  # the last report before it got stuck
    # A blocked worker names its kernel wait when the kernel shows it.
    for rank in (1, 2, 4, 5):
        assert by_rank[rank]["detail"].startswith("blocked: the main thread sleeps in the kernel")

    dumps = run.wait_event("dump", lambda r: r["reason"] == "stall", timeout=120, count=len(STUCK))
    for d in dumps:
        mode, func, _ = STUCK[d["rank"]]
        assert d["where"].startswith(f"{func} (hang_modes.py:"), d
        assert d["path"] == f"rank-{d['rank']}/stacks/" + d["path"].rsplit("/", 1)[1]
        text = (run.run_dir / d["path"]).read_text()
        assert f"in {func}" in text
        assert text.startswith(f"=== mpwatch stack dump: pid {d['pid']}")
    assert len({d["rank"] for d in dumps}) == len(STUCK)
    # The worker's children are dumped with it: here a forked child napping in its own function.
    child_dump = next(d for d in dumps if d["rank"] == 5)
    assert len(child_dump["pids"]) == 2
    assert f"pid {child_dump['pids'][1]} at" in (run.run_dir / child_dump["path"]).read_text()
    assert "in child_napping" in (run.run_dir / child_dump["path"]).read_text()

    st = run.status()
    for w in st["workers"]:
        if w["rank"] in STUCK:
            assert w["state"] == "stalled"
            assert w["stall"]["kind"] == STUCK[w["rank"]][2]
            assert w["stall"]["where"].startswith(STUCK[w["rank"]][1])
            assert w["last_dump"].endswith(".txt")
        else:
            assert w["state"] == "running" and w["stall"] is None
    human = run.ctl("status").stdout
    assert "stuck in stuck_spinning (hang_modes.py:" in human

    pids = {w["rank"]: w["pid"] for w in st["workers"]}
    for rank in STUCK:
        os.kill(pids[rank], signal.SIGUSR2)  # the fixture's release: it reports again
    rec = run.wait_event("recovered", timeout=120, count=len(STUCK))
    assert {r["rank"] for r in rec} == set(STUCK)
    wait_for(lambda: all(w["state"] == "running" for w in run.status()["workers"]), 60,
             what="every rank running again")
    # The healthy rank beside them was never flagged; each stall was dumped once.
    assert not [r for r in run.events("stalled") if r["rank"] == 0]
    assert sorted(d["rank"] for d in run.events("dump") if d["reason"] == "stall") == sorted(STUCK)
    run.ctl("stop")
    run.wait_exit(60)


def test_unmodified_script_is_never_stalled_and_dumps_on_demand(headless, tmp_path):
    count = tmp_path / "count"
    run = headless(FIXTURES / "hang_plain.py", n=1, opts=["--stall-timeout", "2"],
                   env=dict(os.environ, COUNT_FILE=str(count)))

    def counted():
        try:
            return int(count.read_text())
        except (OSError, ValueError):
            return 0
    # 200 counts take at least 4 s (20 ms each): twice the stall timeout, silent all along.
    wait_for(lambda: counted() >= 200, 120, what="the script to count past the stall timeout")
    w = run.worker(0)
    assert w["state"] == "running" and w["heartbeat"] == "none"
    assert not run.events("stalled")

    out = run.ctl("dump", "0").stdout
    assert "dumping rank 0" in out
    dump = run.wait_event("dump", lambda r: r["reason"] == "request", timeout=60)[0]
    assert dump["where"].startswith("count_forever (hang_plain.py:")
    # a healthy rank dumped on request is not "stuck" anywhere: it was there when dumped
    line = wait_for(lambda: next((ln for ln in run.stderr_text.splitlines() if "stack dump" in ln), None), 30,
                    what="the dump's status line")
    assert f"rank 0 stack dump (asked for): {dump['path']}, in count_forever (hang_plain.py:" in line
    assert "stuck" not in line
    assert "in count_forever" in (run.run_dir / dump["path"]).read_text()
    before = counted()
    wait_for(lambda: counted() > before + 25, 60, what="the script to keep running after the dump")
    assert run.worker(0)["state"] == "running"
    assert not run.events("worker_exited")
    run.ctl("stop")
    run.wait_exit(60)


def test_demo_hang_names_the_culprit(hung):
    """The recorded `hung` run (tests/recorded_runs.py: demo/hang.py, rank 1 stops before its
    all_reduce at step 5), read from its events and the live status it gave before its stop."""
    alerts = [r for r in hung.events("alert") if r.get("kind") == "hang"]
    # One finding, updated in place as it learns more (docs/hangs.md): one key, its first version
    # new and every later one an update, rank 1 named in each, the waiting ranks only ever joined
    # (each rank's stall clock is its own: rank 2's may end a tick after rank 0's, and rank 2 then
    # joins the finding), until ranks 0 and 2 both wait.
    standing = [r for r in alerts if not r.get("ended")]
    assert standing and {r["key"] for r in alerts} == {"hang:1"}, alerts
    assert not standing[0].get("update") and all(r.get("update") for r in standing[1:]), standing
    assert all(r["culprits"] == [1] for r in standing), standing
    waiting = [r["waiting"] for r in standing]
    assert waiting[0] and all(set(a) <= set(b) for a, b in zip(waiting, waiting[1:])), waiting
    assert waiting[-1] == [0, 2] and all(w in ([0], [2], [0, 2]) for w in waiting), waiting
    for r in standing:  # each version says whom it names waiting
        assert r["message"].startswith({(0,): "rank 0 waits", (2,): "rank 2 waits"}.get(tuple(r["waiting"]),
                                                                                         "ranks 0,2 wait")), r
    alert = next(r for r in standing if r["waiting"] == [0, 2])
    assert " at step 5 for rank 1, which is at step 4" in alert["message"]
    # The stacks agree: the waiting ranks sit in all_reduce, the culprit in its own code.
    dumps = {d["rank"]: d for d in hung.events("dump") if d["reason"] == "stall"}
    assert sorted(dumps) == [0, 1, 2], dumps
    assert dumps[1]["where"].startswith("hang_here (hang.py:") and dumps[1]["collective"] is None
    for r in (0, 2):
        assert dumps[r]["collective"] == "all_reduce" and dumps[r]["where"].startswith("main (hang.py:")
    # The finding once every stall dump is in (they land in any order: a finding may name the
    # peers' all_reduce before the culprit's own frame is known, or rank 0 alone): the last one,
    # as the recording stopped the run once the status agreed with it.
    final = alerts[-1]
    assert final["message"].startswith("ranks 0,2 wait in all_reduce at step 5 for rank 1, which is at "
                                       "step 4 (in hang_here (hang.py:"), final["message"]
    # one finding, updated in place: the status's own analysis agreed with it, live, before the stop
    st = hung.seen
    assert st["straggler"]["culprits"] == [1]
    hangs = [a["message"] for a in st["alerts"] if a["kind"] == "hang"]
    assert hangs == [st["straggler"]["text"]], st["alerts"]
    assert "(in hang_here (hang.py:" in st["straggler"]["text"]
