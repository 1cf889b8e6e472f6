"""The supervisor's one fault boundary (issue 39, supervisor.boundary): each room of the
supervisor broken in turn (its entry point raises on every call, the injects_bugs way) costs
that room alone. The run still ends by itself, with final.json and its ranks' true causes;
supervisor.log holds the room's traceback and a `room_failed` event says it once. An input of
a rank that trips its handler is a note on that rank instead (`bad_inputs`), and its cause stays
true. The supervisor runs in this process (supervisor.core.Run on the test's main thread) so
that monkeypatch can break a room; its workers are real processes, its clients real sockets."""
from __future__ import annotations

import io
import json
import os
import signal
import threading
import urllib.error
import urllib.request

import pytest

from mpwatch.rundir import reader
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor import errors, snapshot
from mpwatch.supervisor.commands import Commands
from mpwatch.supervisor.core import Options, Run
from mpwatch.supervisor.diagnose.sampler import Sampler
from mpwatch.supervisor.diagnose.stall_watch import StallWatch
from mpwatch.supervisor.diagnose.straggler_watch import StragglerWatch
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.supervisor.headless import Reporter
from mpwatch.supervisor.ipc.channels import ChannelHub
from mpwatch.supervisor.live.room import LiveRoom
from mpwatch.supervisor.metrics.server import MetricsServer
from mpwatch.supervisor.workers import exits
from mpwatch.supervisor.workers.ledger import ReportLedger
from mpwatch.supervisor.workers.reaping import Reaper
from tests.faults.conftest import FAULTS
from tests.helpers import assert_gone, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.injects_bugs]
DEADLINE_S = 60  # past it the run is stopped (SIGTERM to this process): the test then fails on its end
BOOM = "exit 1: RuntimeError: boom"
GPUS = {"gpus": [{"name": "Fake 8G", "mem_total": 8 << 30}],
        "frames": [{"at": 0, "gpus": [{"util_gpu": 50, "processes": [{"pid": "rank:0", "mem": 1 << 20}]}]}]}

# room -> what breaks it: (owner, attribute) pairs, each replaced by a function that raises
ROOMS = {
    "stall watch": [(StallWatch, "check")],
    "straggler watch": [(StragglerWatch, "check")],
    "live room": [(LiveRoom, "push"), (LiveRoom, "on_exit"), (LiveRoom, "on_hello")],
    "report ledger": [(ReportLedger, "flush"), (ReportLedger, "write_report")],
    "process sampler": [(Sampler, "sample")],
    "GPU watcher": [(GpuWatch, "tick")],
    "snapshot": [(snapshot, "worker_status")],
    "channel hub": [(ChannelHub, "_turn")],
    "control commands": [(Commands, "run_next")],
    "reaper": [(Reaper, "_judge")],
    "event log": [(RunStore, "event")],
    "headless status": [(Reporter, "tick")],
    "metrics": [(MetricsServer, "_page")],
}
# a rank's input whose handler raises: what breaks it, the cause rank 1 is then given, the ranks noted
# (every rank's end is judged from its stderr; a failed one's alone is searched for an OOM)
INPUTS = {
    "its stderr's cause": ([(exits, "judge")], "exit 1", [0, 1]),
    "its stderr's CUDA OOM": ([(GpuWatch, "on_worker_exit")], BOOM, [1]),
}


def breaker(what: str):
    def broken(*args, **kwargs):
        raise RuntimeError(f"injected: {what}")
    return broken


def run_broken(tmp_path, monkeypatch, targets, what: str, **opts) -> tuple[Run, int]:
    """A two-rank run of two_ends.py with every target broken; its exit code."""
    for owner, name in targets:
        monkeypatch.setattr(owner, name, breaker(what))
    nvml = tmp_path / "gpus.json"
    nvml.write_text(json.dumps(GPUS))
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                                             signal.SIGUSR2)}
    run = Run(Options(script=str(FAULTS / "two_ends.py"), args=[], nprocs=2, run_dir=tmp_path / "run",
                      cwd=str(tmp_path), gpu_interval=0.2, metrics_port=0, **opts),
              settings=Settings(strict_states=True, scripted_nvml=str(nvml)), status_out=Reporter(io.StringIO()))
    done = threading.Event()
    guard = threading.Thread(target=_deadline, args=(done,), daemon=True)
    scraper = threading.Thread(target=_scrape, args=(run, done), daemon=True)
    try:
        run.setup()
        guard.start()
        scraper.start()
        code = run.serve()
    finally:
        done.set()
        for s, h in saved.items():
            signal.signal(s, h)
    pids = [e["pid"] for e in reader.read_events(run.run_dir) if e.get("event") == "worker_started"]
    assert_gone(pids)
    return run, code


def _deadline(done: threading.Event) -> None:
    if not done.wait(DEADLINE_S):
        os.kill(os.getpid(), signal.SIGTERM)  # the run stops: the test fails on what it finds


def _scrape(run: Run, done: threading.Event) -> None:
    """A client of the rooms that serve clients: /metrics asked while the run lives."""
    where = wait_for(lambda: run.metrics_at or done.is_set(), what="the metrics server")
    while not done.is_set() and isinstance(where, str):
        try:
            urllib.request.urlopen(f"http://{where}/metrics", timeout=5).read()
        except (urllib.error.URLError, OSError):
            pass
        done.wait(0.3)


def ends(run: Run) -> dict:
    final = json.loads((run.run_dir / "final.json").read_text())
    return {w["rank"]: w for w in final["workers"]}


def room_events(run: Run) -> list[dict]:
    return [e for e in reader.read_events(run.run_dir) if e.get("event") == "room_failed"]


@pytest.mark.parametrize("room", list(ROOMS))
def test_a_broken_room_is_said_once_and_the_run_ends_with_its_true_causes(tmp_path, monkeypatch, room):
    run, code = run_broken(tmp_path, monkeypatch, ROOMS[room], room)
    assert code == 1
    w = ends(run)
    assert (w[0]["state"], w[0]["cause"]) == ("exited", "exit 0"), w[0]
    assert w[1]["state"] == "failed" and w[1]["cause"].startswith(BOOM if room != "reaper" else "exit 1"), w[1]
    log = (run.run_dir / errors.FILE_NAME).read_text()
    where = {"metrics": "metrics page"}.get(room, room)  # the room's place, where it has several
    assert f"] {where}: RuntimeError: injected: {room}" in log, log[-3000:]
    assert "Traceback (most recent call last):" in log
    said = room_events(run)
    if room == "event log":  # nothing can be said there: the log says it
        assert said == []
    else:
        assert [e["room"] for e in said] == [room], said
        assert said[0]["why"] == f"RuntimeError: injected: {room}"
    assert "ended with exit code 1" in log


@pytest.mark.parametrize("what", list(INPUTS))
def test_an_input_that_trips_its_handler_is_a_note_on_its_rank(tmp_path, monkeypatch, what):
    targets, cause, ranks = INPUTS[what]
    run, code = run_broken(tmp_path, monkeypatch, targets, what)
    assert code == 1
    w = ends(run)
    assert (w[0]["state"], w[0]["cause"]) == ("exited", "exit 0"), w[0]
    assert w[1]["state"] == "failed" and w[1]["cause"].startswith(cause), w[1]
    note = {"count": 1, "why": f"{what}: RuntimeError: injected: {what}"}
    assert [r for r in (0, 1) if w[r].get("bad_inputs") == note] == ranks, w
    noted = [e for e in reader.read_events(run.run_dir) if e.get("event") == "bad_input"]
    assert sorted((e["rank"], e["what"], e["count"]) for e in noted) == [(r, what, 1) for r in ranks]
    assert room_events(run) == []  # the rank's input, not a room
    log = (run.run_dir / errors.FILE_NAME).read_text()
    assert all(f"] rank {r}: {what}: RuntimeError: injected: {what}" in log for r in ranks) and "Traceback" in log


def test_a_thinning_pass_that_fails_is_the_boundarys_and_the_events_go_on(tmp_path, monkeypatch):
    """The event log's thinning runs in a thread of its own (rundir.writer): an exception there is
    handed to the supervisor's boundary (a room_failed, the traceback in supervisor.log), never a
    thread's death on stderr; events.jsonl keeps every line, and the next pass may run."""
    from mpwatch.rundir import thinning

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(thinning, "thin_file", boom)
    store = RunStore(tmp_path / "run", Settings(events_mb=0.001))  # the smallest cap: 16 KiB
    store.create()
    said: list[tuple[str, str]] = []
    store.on_bug = lambda room, exc: said.append((room, str(exc)))
    n = 0
    while not said and n < 10_000:
        store.event("report", 0, step=n, loss=1.0, metrics={}, n=1, dropped=0)
        n += 1
        if store.events_size > store.events_cap:
            wait_for(lambda: said or store._thinner is None and store.events_size <= store.events_cap, 10,
                     what="the thinning pass")
    assert said == [("event thinning", "boom")]
    wait_for(lambda: store._thinner is None, 10, what="the thread's end")
    store.event("report", 0, step=n, loss=1.0, metrics={}, n=1, dropped=0)
    store.flush()
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    assert len(lines) == n + 1 and json.loads(lines[-1])["step"] == n
    assert store.disk_error is None
