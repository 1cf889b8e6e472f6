"""Issue 23 through the merged view (sources.multinode.source: several runs as one, as `mpwatch
attach A B` shows them), on two real local runs: "checkpoint all" and a tunable's change reach
every node at the same step (each node's supervisor says the step it would pick, the latest
wins), and the merged status shows one request with the answers of every node's ranks."""
from __future__ import annotations

import os
import re

from mpwatch.cli.attach_nodes import connect
from mpwatch.settings import Settings
from mpwatch.sources.remote.client import Transport
from tests.helpers import FIXTURES, wait_for

LOOP = FIXTURES / "control_loop.py"


def test_checkpoint_all_and_a_change_reach_every_node_at_one_step(headless):
    runs = [headless(LOOP, "0", "0.05", n=2), headless(LOOP, "0", "0.1", n=1)]  # one node twice as slow
    for run in runs:
        run.wait_event("tunable_declared", count=4)
        wait_for(lambda run=run: all(w["step"] and w["steps_per_s"] for w in run.status()["workers"]),
                 what="steps")
    source = connect([str(r.run_dir) for r in runs], Transport.from_settings(Settings()), Settings().tmpdir)
    try:
        st = wait_for(lambda: (lambda s: s if len(s["workers"]) == 3 else None)(source.status(tail=0)),
                      what="the merged status")
        assert [w["rank"] for w in st["workers"]] == [0, 1, 2]
        plan = source.ask("checkpoint", "all", by="test", plan=True)["step"]
        got = source.ask("checkpoint", "all", by="test")
        s = got["step"]
        assert s is not None and s >= plan
        assert re.search(rf"node 0: checkpoint asked of ranks 0-1 at step {s}\b", got["message"])
        assert re.search(rf"node 1: checkpoint asked of rank 0 at step {s}\b", got["message"])
        for run, n in zip(runs, (2, 1), strict=True):
            taken = run.wait_event("checkpoint_taken", timeout=90, count=n)
            assert {(e["step"], e["late"]) for e in taken} == {(s, False)}
        changed = source.set_tunable("lr", "0.25", by="test")
        for run, n in zip(runs, (2, 1), strict=True):
            applied = run.wait_event("tunable_applied", timeout=90, count=n)
            assert {(e["step"], e["late"]) for e in applied} == {(changed["step"], False)}

        def merged():
            st = source.status(tail=0)
            lr = next(t for t in st.get("tunables") or [] if t["name"] == "lr")
            req = (st.get("checkpoints") or [None])[-1]
            done = lr["changes"] and len(lr["changes"][-1]["answers"]) == 3 and req and len(req["answers"]) == 3
            return (lr, req) if done else None
        lr, req = wait_for(merged, timeout=30, what="the merged answers")
        assert lr["ranks"] == [0, 1, 2] and len(lr["changes"]) == 1 and lr["value"] == 0.25
        assert [a["rank"] for a in lr["changes"][0]["answers"]] == [0, 1, 2]
        assert req["ranks"] == [0, 1, 2] and {a["step"] for a in req["answers"]} == {s} and not req["waiting"]
    finally:
        source.close()


def test_a_profile_and_a_memory_snapshot_of_all_are_one_request_each_with_every_nodes_outcomes(headless):
    """Every action's list joins the nodes' (sources.multinode.control_merge): a profile and a CUDA
    memory snapshot asked of all through the merged view are one request each, with the outcome of
    every rank of both nodes (here each one's refusal: the loop never imports torch, py-spy is off)."""
    env = dict(os.environ, MPWATCH_PYSPY="off")
    runs = [headless(LOOP, "0", "0.05", n=2, env=env), headless(LOOP, "0", "0.05", n=1, env=env)]
    for run in runs:
        wait_for(lambda run=run: all(w["step"] for w in run.status()["workers"]), what="steps")
    source = connect([str(r.run_dir) for r in runs], Transport.from_settings(Settings()), Settings().tmpdir)
    try:
        wait_for(lambda: len(source.status(tail=0)["workers"]) == 3, what="the merged status")
        profiled = source.ask("profile", "all", by="test", steps=2)
        snapped = source.ask("memory", "all", by="test")
        for run, n in zip(runs, (2, 1), strict=True):
            run.wait_event("profile_failed", timeout=90, count=n)
            run.wait_event("memory_failed", timeout=90, count=n)

        def merged():
            st = source.status(tail=0)
            lists = [st.get("profiles") or [], st.get("memory_snapshots") or []]
            return lists if all(len(reqs) == 1 and len(reqs[0]["results"]) == 3 for reqs in lists) else None
        (profile,), (snapshot,) = wait_for(merged, timeout=30, what="the merged outcomes")
        assert profile["step"] == profiled["step"] and profile["steps"] == 2
        assert snapshot["step"] == snapped["step"] and "steps" not in snapshot
        for req, why in ((profile, "py-spy is off"), (snapshot, "has not imported torch")):
            assert req["ranks"] == [0, 1, 2] and not req["waiting"]
            assert [r["rank"] for r in req["results"]] == [0, 1, 2]
            assert all(r["state"] == "failed" and why in (r["why"] or "") for r in req["results"])
    finally:
        source.close()
