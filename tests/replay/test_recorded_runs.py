"""The replay of real runs recorded by the supervisor under test (tests/recorded_runs.py):
at the stall the rows are stalled and the culprit is named, at the crash the cause is shown,
at the OOM the GPU alert, at the end the state is final.json's; a rank's curve is its own;
the logs and the GPU timeline are those of the cursor's moment."""
from __future__ import annotations

import json

from mpwatch.contract import RunState, State
from mpwatch.rundir import layout, postmortem, reader
from mpwatch.sources.replay import ReplaySource
from mpwatch.tui import rundata
from mpwatch.tui.render import view
from tests.replay.conftest import kinds, rebuilt_end, seek


def worker(st, rank):
    return next(w for w in st["workers"] if w["rank"] == rank)


def test_the_hang_at_its_stall_and_at_its_culprit(hung):
    src = ReplaySource(hung.dir)
    final = json.loads((hung.dir / layout.FINAL_JSON).read_text())
    assert src.status() == final  # the end is the final status, as written
    hangs = [e for e in src.events_list if e["event"] == "alert" and e.get("kind") == "hang"]
    assert hangs, kinds(src)
    stopping = next(i for i, e in enumerate(src.events_list) if e["event"] == "stopping")
    assert all(src.events_list.index(e) < stopping for e in hangs)  # no findings while the ranks are stopped
    # the moment mpwatch named the culprit with its frame (the last finding before the stop)
    seek(src, lambda e: e is hangs[-1], "the last hang alert")
    st = src.status()
    assert st["run"]["state"] == RunState.RUNNING
    assert all(w["state"] == State.STALLED for w in st["workers"]), [w["state"] for w in st["workers"]]
    assert st["straggler"] is not None and st["straggler"]["culprits"] == [1]
    assert sorted(st["straggler"]["waiting"]) == [0, 2]
    assert "for rank 1, which is at step" in (st["straggler"]["text"] or "")
    assert [a["message"] for a in st["alerts"] if a["kind"] == "hang"] == [st["straggler"]["text"]]
    # the rows say where each waits, once every stall's dump is in (just before the stop): the
    # peers in all_reduce, the culprit in its own frame
    src.move("seq", stopping)  # the event before the stop
    st = src.status()
    assert "all_reduce" in view.note_text(worker(st, 0)) and "stalled at step" in view.note_text(worker(st, 0))
    assert "hang_here" in view.note_text(worker(st, 1))
    assert worker(st, 1)["step"] < worker(st, 0)["step"]
    assert worker(st, 0)["last_dump"] and rundata.read_dump(worker(st, 0)["last_dump"])  # the dump of that moment
    # one event back from rank 0's stall (the moment of an earlier event, maybe a start): not stalled yet
    stalls = [i for i, e in enumerate(src.events_list) if e["event"] == "stalled" and e["rank"] == 0]
    src.move("seq", stalls[-1])  # the event before it
    assert len(stalls) == 1 and worker(src.status(), 0)["state"] in (State.RUNNING, State.STARTING)
    src.move("step", 1)
    assert worker(src.status(), 0)["state"] == State.STALLED
    # and the jump keys stop at the stalls and the alerts
    src.move("start")
    assert src.move("jump", 1) and src.where()[2]["event"] in ("stalled", "alert", "gpu_alert")


def test_a_crash_with_restarts_step_by_step(crashed):
    src = ReplaySource(crashed.dir)
    i = seek(src, lambda e: e["event"] == "worker_exited" and e.get("state") == "failed", "a failure")
    st = src.status()
    r = src.events_list[i]["rank"]
    w = worker(st, r)
    assert w["state"] == State.RESTARTING  # it had a restart left: shown as live, not as failed
    assert "ZeroDivisionError" in (w["cause"] or "") and w["restarts"] == 0
    assert src.move("jump", 1) and src.where()[2]["event"] in ("restarted", "worker_exited")
    seek(src, lambda e: e["event"] == "restarted" and e["rank"] == r, "its restart")
    w = worker(src.status(), r)
    assert w["restarts"] == 1 and w["state"] in (State.STARTING, State.RUNNING) and w["cause"] is None
    # the log of the first failure's moment: that attempt's traceback, no restart marker yet
    seek(src, lambda e: e is src.events_list[i], "the failure again")
    err = src.logs(r, "stderr", 50)
    assert any("ZeroDivisionError" in ln for ln in err) and not any("--- mpwatch:" in ln for ln in err)
    src.move("end")
    assert any("--- mpwatch: rank" in ln for ln in src.logs(r, "stderr", 50))


def test_the_end_rebuilt_from_the_files_agrees_with_final_json(crashed, hung, oom):
    for rec in (crashed, hung, oom):
        src = ReplaySource(rec.dir)
        final = json.loads((rec.dir / layout.FINAL_JSON).read_text())
        st = rebuilt_end(src)
        assert st["run"]["state"] == final["run"]["state"] == RunState.FINISHED
        assert st["run"]["exit_code"] == final["run"]["exit_code"]
        assert st["run"]["restarts"] == final["run"]["restarts"]
        keys = ("rank", "pid", "state", "step", "loss", "restarts", "exit_code", "signal", "cause")
        assert [{k: w[k] for k in keys} for w in st["workers"]] == [{k: w[k] for k in keys} for w in final["workers"]]


def test_the_oom_at_its_moment(oom):
    src = ReplaySource(oom.dir)
    seek(src, lambda e: e["event"] == "gpu_alert" and e.get("kind") == "oom", "the OOM finding")
    st = src.status()  # the moment torch's observer saw it: rank 0 still runs, its finding is in
    assert worker(st, 0)["state"] == State.RUNNING
    assert worker(st, 0)["memory"]["oom"] == "CUDA OOM on GPU 0: rank 0 itself held 6.0G; asked 2.0G, 1.2G free"
    seek(src, lambda e: e["event"] == "gpu_alert" and e.get("kind") == "oom" and e.get("update"), "its death")
    st = src.status()
    w = worker(st, 0)
    assert w["state"] == State.FAILED and "CUDA out of memory" in (w["cause"] or "")
    assert w["memory"]["snapshot"].startswith(str(oom.dir / "rank-0" / "memory" / "oom-"))
    gpu = st["gpus"][0]
    (finding,) = [a for a in gpu["alerts"] if a["kind"] == "oom"]  # one finding, completed at the death
    assert finding["rank"] == 0 and "and died of it" in finding["message"]
    assert gpu["mem_total"] == 10 << 30 and worker(st, 1)["gpu"]["mem_bytes"] == 1 << 30
    tl = src.gpu_timeline(120)
    t = src.time_at()
    assert tl["ticks"] and all(tk["ts"] <= t for tk in tl["ticks"]) and all(m["ts"] <= t for m in tl["marks"])
    # before the OOM: no OOM alert yet, rank 0 on its GPU
    src.move("start")
    assert not any(a["kind"] == "oom" for g in src.status()["gpus"] for a in g["alerts"])


def test_a_rank_is_drawn_from_its_own_reports_only(children):
    recs = [json.loads(ln) for ln in (children.dir / layout.EVENTS).read_text().splitlines()]
    kids = [r for r in recs if r["event"] == "report" and "child_of" in r]
    assert kids and all(r["loss"] >= 100 for r in kids)  # the children's reports are in the file
    src = ReplaySource(children.dir)
    for rank in (0, 1):
        curve = src.history(rank)
        assert curve and all(loss <= 1.0 for _, loss in curve), curve[:5]
        assert curve[-1] == (29.0, 1.0 / 30)
        assert all(x <= 1.0 for x in worker(src.status(), rank)["loss_tail"])
    past = reader.history(children.dir)  # the detail view's fallback after a live run
    assert past.keys() == {0, 1} and all(loss <= 1.0 for pts in past.values() for _, loss in pts)


def test_the_summary_of_a_run_cut_short_keeps_each_ranks_own_last_step(children, tmp_path):
    d = children.copy(tmp_path)
    (d / layout.FINAL_JSON).unlink()  # the last step and loss come from the events alone
    s = postmortem.summarize(reader.read(d))
    assert [(r["step"], r["loss"]) for r in s["ranks"]] == [(29, 1.0 / 30), (29, 1.0 / 30)]


def test_a_run_cut_short_by_a_sigkilled_supervisor(killed):
    src = ReplaySource(killed.dir)
    assert any("final.json is missing" in n for n in src.notes)
    st = src.status()  # the end, rebuilt: the run is over, the ranks as last heard of
    assert st["run"]["state"] == RunState.FINISHED and st["run"]["exit_code"] is None
    assert [w["rank"] for w in st["workers"]] == [0, 1]
    assert all(w["step"] is not None and w["step"] >= 3 for w in st["workers"])
