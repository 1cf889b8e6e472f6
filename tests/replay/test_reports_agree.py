"""The replay's two ways to the reports (sources.replay.reports) give the same status at every
moment: the window of the file around the cursor, which serves until the report index is built,
and the index. Both take a moment's reports as the run was then: those timed at or before the
cursor's event, wherever events.jsonl has them (the supervisor holds a report back up to a second
before writing it: its line may come after the event's; issue 40). A report written compact (a
NaN loss) is found by both;
and the index, extended by the poller's status and the detail view's curve on their own
threads while a live run's file grows, holds each report once."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time

from mpwatch.contract import Event
from mpwatch.rundir import layout
from mpwatch.rundir.eventlines import report_fields
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.poller import TAIL_POINTS
from tests.replay.conftest import STORED_FAILED, STORED_HANG, seek
from tests.replay.test_events_cap import T0

NAN = float("nan")


def at(src: ReplaySource, pos: int) -> None:
    n = len(src.events_list)
    if pos < n:
        src.move("seq", pos + 1)
    else:
        src.move("end")
    assert src.where()[0] == pos


def assert_window_and_index_agree(path, part=lambda st: st) -> None:
    """At every cursor position, with the TUI's tail and the default one: the status (or its
    `part`) built from the window (a source whose index is never built) equals the index's."""
    window, index = ReplaySource(path), ReplaySource(path)
    index.read_all()
    assert index.files.reports is not None
    n = len(window.events_list)
    assert n == len(index.events_list) and n > 0
    for pos in range(n + 1):
        at(window, pos)
        at(index, pos)
        for tail in (None, TAIL_POINTS):
            assert part(window.status(tail)) == part(index.status(tail)), \
                f"at {pos} ({(window.where()[2] or {}).get('event')})"
    assert window.files.reports is None  # the window answered every time


def steps_by_time(path) -> list[dict[int, int | None]]:
    """Each notable event's moment: every rank's last own reported step among the reports timed
    at or before that event (wherever the file has them), read with json."""
    recs = [json.loads(line) for line in (path / layout.EVENTS).read_text().splitlines()]
    reports = [r for r in recs if r["event"] == Event.REPORT and "child_of" not in r]
    out: list[dict[int, int | None]] = []
    for e in recs:
        if e["event"] in (Event.REPORT, Event.THINNED):
            continue
        last: dict[int, int | None] = {}
        for r in sorted((r for r in reports if r["ts"] <= e["ts"]), key=lambda r: r["ts"]):
            last[r["rank"]] = r["step"]
        out.append(last)
    return out


def assert_rows_are_the_reports_timed_before_each_event(d) -> int:
    """At every event, both ways: each rank's row shows the step of its last report timed at or
    before the event. How many events had a report written after them but timed before."""
    by_time = steps_by_time(d)
    window, index = ReplaySource(d), ReplaySource(d)
    index.read_all()
    assert len(by_time) == len(index.events_list)
    late = 0
    for src in (window, index):
        for pos, steps in enumerate(by_time):
            at(src, pos)
            shown = {w["rank"]: w["step"] for w in src.status()["workers"]}
            assert shown == {r: steps.get(r) for r in shown}, f"at {pos} ({src.events_list[pos]['event']})"
    written = steps_as_written(d)
    late = sum(a != b for a, b in zip(written, by_time, strict=True))
    return late


def steps_as_written(path) -> list[dict[int, int | None]]:
    """Each notable event: every rank's last own reported step among the lines written before
    it (the file's order: what the replay showed before issue 40)."""
    out: list[dict[int, int | None]] = []
    last: dict[int, int | None] = {}
    for line in (path / layout.EVENTS).read_text().splitlines():
        rec = json.loads(line)
        if rec["event"] == Event.REPORT:
            if "child_of" not in rec:
                last[rec["rank"]] = rec["step"]
        elif rec["event"] != Event.THINNED:
            out.append(dict(last))
    return out


def held_back_run(path) -> None:
    """Issue 40's run, as the supervisor's writer puts it: rank 1 fails at +3.0 s; rank 0's report
    timed +2.9 s (step 13), held back by the ledger, is written after that event."""
    store = RunStore(path, Settings())
    store.create()
    store.write_json(layout.RUN_JSON, {"run_id": "held", "started": T0, "pid": 1, "script": "train.py"})
    store.event("run_started", ts=T0, script="train.py", args=[], nprocs=2, run_dir=str(path), pid=1)
    for r in (0, 1):
        store.event("worker_started", r, ts=T0 + 0.1, pid=100 + r, world_size=2, attempt=0)
    for r in (0, 1):
        store.report(r, T0 + 1.9, report_fields(3, 0.5, {}, 4, 0))
    store.event("worker_exited", 1, ts=T0 + 3.0, pid=101, exit_code=1, signal=None, state="failed",
                cause="exit 1: ValueError: bad batch", reason=None, stderr_tail=[])
    store.report(0, T0 + 2.9, report_fields(13, 0.1, {}, 10, 0))  # held back: written after the exit
    store.report(0, T0 + 3.9, report_fields(23, 0.05, {}, 10, 0))
    store.event("worker_exited", 0, ts=T0 + 4.0, pid=100, exit_code=0, signal=None, state="exited",
                cause="exit 0", reason=None, stderr_tail=[])
    store.close()


def test_the_replays_rank_rows_at_each_event_are_the_reports_timed_before_it(tmp_path):
    """Issue 40: `mpwatch show` on a run that failed, at "+3.0 s event 4/7" rank 0 showed step 3
    though its report timed +2.9 s said step 13 (written later in events.jsonl: the supervisor
    held it back). The screen at a moment is the run as it was then: in that run, and at every
    event of both recorded runs."""
    d = tmp_path / "held"
    held_back_run(d)
    assert assert_rows_are_the_reports_timed_before_each_event(d) == 1  # the file's order said step 3
    src = ReplaySource(d)
    seek(src, lambda e: e["event"] == Event.WORKER_EXITED and e["rank"] == 1, "rank 1's failure")
    assert [(w["rank"], w["step"]) for w in src.status()["workers"]] == [(0, 13), (1, 3)]
    for name, stored in (("failed", STORED_FAILED), ("hang", STORED_HANG)):
        d = tmp_path / name
        shutil.copytree(stored, d)
        assert_rows_are_the_reports_timed_before_each_event(d)


def test_the_window_and_the_index_agree_at_every_moment_of_the_hang(tmp_path):
    d = tmp_path / "hang"
    shutil.copytree(STORED_HANG, d)
    assert_window_and_index_agree(d)
    src = ReplaySource(d)
    src.read_all()
    first_stall = next(i for i, e in enumerate(src.events_list) if e["event"] == Event.STALLED)
    at(src, first_stall)  # a stall comes after a report, never at start-up: the stalled rank's report was written
    st = src.status()
    assert all(w["step"] is not None for w in st["workers"] if w["state"] == "stalled")


def nan_run(path) -> None:
    """Rank 1's last report has a NaN loss (written compact by the supervisor's writer), then
    it goes silent while rank 0 reports on, long enough to push that report out of the window."""
    store = RunStore(path, Settings())
    store.create()
    store.write_json(layout.RUN_JSON, {"run_id": "nan", "started": T0, "pid": 1, "script": "train.py"})
    store.event("run_started", ts=T0, script="train.py", args=[], nprocs=2, run_dir=str(path), pid=1)
    for r in (0, 1):
        store.event("worker_started", r, ts=T0, pid=100 + r, world_size=2, attempt=0)
    for i in range(5):
        for r in (0, 1):
            store.report(r, T0 + 1 + i, report_fields(i, 1.0 / (i + 1), {}, 1, 0))
    store.report(1, T0 + 6, report_fields(5, NAN, {}, 1, 0))
    for i in range(5, 400):
        store.report(0, T0 + 6 + i / 100, report_fields(i, 1.0 / (i + 1), {}, 1, 0))
    store.event("stalled", 1, ts=T0 + 12, silent_for=6.0, step=5, pid=101, kind="blocked", detail=None)
    store.close()


def test_a_rank_silent_since_a_nan_loss_shows_that_report_before_the_index(tmp_path):
    d = tmp_path / "run"
    nan_run(d)
    text = (d / layout.EVENTS).read_text()
    assert '{"ts":%s,"event":"report","rank":1,"step":5,"loss":"nan",' % (T0 + 6) in text  # compact
    src = ReplaySource(d)
    seek(src, lambda e: e["event"] == Event.STALLED, "rank 1's stall")
    w1 = next(w for w in src.status()["workers"] if w["rank"] == 1)
    assert src.files.reports is None
    assert w1["step"] == 5 and w1["loss"] is None  # its last report: the NaN one, no loss reported
    # what each rank's last report gives (the window keeps a rank silent for longer than it to
    # that report alone: its loss_tail is shorter than the index's until the index is built)
    last = ("state", "step", "loss", "heartbeat", "heartbeat_age")
    assert_window_and_index_agree(d, lambda st: [{k: w[k] for k in last} for w in st["workers"]])


class Contended:
    """A lock that says when a thread found it held and waited for it."""

    def __init__(self, lock):
        self.lock = lock
        self.waited = threading.Event()

    def acquire(self, blocking=True, timeout=-1):
        if self.lock.acquire(False):
            return True
        if not blocking:
            return False
        self.waited.set()
        return self.lock.acquire(True, timeout)

    def release(self):
        self.lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


class Race:
    """The detail view's curve (history) and the poller's status, each on its own thread, take
    in the same new lines: the curve's thread is held at its first slice of the file's bytes
    (the index's parsing, past where it read how far it had got) until the poller's thread
    slices them too, or waits for the lock the curve's thread holds."""

    def __init__(self, src: ReplaySource, lock: Contended):
        self.src, self.lock = src, lock
        self.curving, self.polled = threading.Event(), threading.Event()
        self.errors: list[BaseException] = []
        self.curve = threading.Thread(target=self.go, args=(lambda: src.history(0),), daemon=True)
        self.poll = threading.Thread(target=self.go, args=(src.status,), daemon=True)
        race = self

        class Gate(bytes):
            def __getitem__(self, key):
                if isinstance(key, slice):
                    race.sliced()
                return bytes.__getitem__(self, key)

        lock.waited.clear()
        src.files.data = Gate(src.files.data[:])

    def sliced(self) -> None:
        if threading.current_thread() is not self.curve:
            self.polled.set()
        elif not self.curving.is_set():
            self.curving.set()
            deadline = time.monotonic() + 30
            while not (self.polled.is_set() or self.lock.waited.is_set()) and time.monotonic() < deadline:
                self.polled.wait(0.01)

    def go(self, fn) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread (run)
            self.errors.append(exc)

    def run(self) -> None:
        self.curve.start()
        assert self.curving.wait(30), "the curve's thread never parsed the new lines"
        self.poll.start()
        for t in (self.curve, self.poll):
            t.join(30)
            assert not t.is_alive()
        assert not self.errors, self.errors


def live_run(d) -> RunStore:
    """A live run (its supervisor here is this test process: run.json and control.json name it)."""
    store = RunStore(d, Settings())
    store.create()
    store.write_json(layout.RUN_JSON, {"run_id": "live", "started": T0, "pid": os.getpid()})
    store.write_json(layout.CONTROL_JSON, {"pid": os.getpid()})
    store.event("run_started", ts=T0, script="train.py", args=[], nprocs=2, run_dir=str(d), pid=os.getpid())
    for r in (0, 1):
        store.event("worker_started", r, ts=T0, pid=100 + r, world_size=2, attempt=0)
    return store


def reports(store: RunStore, steps: range) -> None:
    for step in steps:
        for r in (0, 1):
            store.report(r, T0 + step, report_fields(step, 1.0 / (step + 1), {}, 1, 0))
    store.flush()


def test_curve_and_status_on_their_threads_index_each_report_once(tmp_path):
    """A live run's events.jsonl grows; each time the detail view's curve and the poller's
    status take in the new lines together (Race); the index then holds each report once, as
    a fresh source's does."""
    d = tmp_path / "run"
    store = live_run(d)
    try:
        reports(store, range(50))
        src = ReplaySource(d)
        assert src.live
        src.read_all()
        lock = src.files._swap = Contended(src.files._swap)
        for k in range(3):
            reports(store, range(50 + 40 * k, 90 + 40 * k))
            assert src.reload(force=True)
            assert src.files.reports is not None and src.files.reports.upto < src.files.indexed
            Race(src, lock).run()
        fresh = ReplaySource(d)
        fresh.read_all()
        have, want = src.files.reports, fresh.files.reports
        assert have is not None and want is not None
        for r in (0, 1):
            assert list(have.series[r].step) == list(want.series[r].step) == [float(s) for s in range(170)]
            assert list(have.series[r].ts) == list(want.series[r].ts)
            assert list(have.series[r].at) == list(want.series[r].at)
            assert src.history(r) == fresh.history(r)
    finally:
        store.close()
