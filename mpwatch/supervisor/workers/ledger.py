"""The report ledger: what the channel hub hears from workers lands here.

The hub (supervisor.ipc.channels) calls on_hello, on_frame, on_bad and on_close on its own
threads; each applies what it got to the worker's row under the run's lock and returns
quickly. A worker's reports go to events.jsonl at most once per REPORT_EVENT_S (the
latest step and loss, every metric since, and n, the report() calls it stands for); the
main loop writes those held back once their slot comes (`flush`), and a worker's last
report is written before its exit (`write_report`). The ledger owns a worker's "first report"
(`Attempt.first_report`: its first progress, whatever sent it), where its stall clock starts. A
batch's `live` entries (declarations, answers) and a hello of protocol 2 go on to the live room
(supervisor.live.room). A batch's CUDA OOM records are merged into the attempt's and each new
OOM goes on to the GPU watcher (`oom`: supervisor.gpu.watch's on_oom), outside the run's lock.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from mpwatch.contract import (
    WORK_METRIC,
    Event,
    LiveEntry,
    OomRecord,
    State,
    as_number,
    keep_refused,
    protocol,
    validate_live,
)
from mpwatch.rundir import eventlines
from mpwatch.supervisor import boundary
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.ipc import identity
from mpwatch.supervisor.workers.batch_check import (
    METRICS_KEPT,
    PHASES_KEPT,
    Report,
    keep_metrics,
    keep_phases,
    validate_batch,
    validate_cuda,
    validate_oom,
)
from mpwatch.supervisor.workers.worker import ChildReport, Downlink, PendingReport, Worker

# events.jsonl gets a rank's latest report at most this often; a point a second per rank
# draws the curve of a finished run (a live run's curves come from the in-memory history).
REPORT_EVENT_S = 1.0
BAD_FRAME_EVENTS = (1, 10, 100, 1000)  # a worker's bad frames that get an event (counted all)
REFUSALS_SAID = 10  # refused hellos said one by one; past them, every 100th
HELD_MAX = 1024  # a starting rank's messages kept until the main thread has its pid
_Handle = Callable[["Peer", dict[str, Any]], None]  # a hub callback, held with its message


class Peer(Downlink, Protocol):
    """What the hub knows of a connection: its rank, pid and protocol version (from its
    hello), and how to send it a frame."""

    rank: int
    version: int


class LiveSink(Protocol):
    """Where a batch's live entries and a rank's channel go (supervisor.live.room's LiveRoom)."""

    def on_hello(self, w: Worker, peer: Downlink, version: int) -> None: ...

    def on_entries(self, w: Worker, entries: list[LiveEntry]) -> None: ...


class OomSink(Protocol):
    """Where a rank's new CUDA OOM goes (supervisor.gpu.watch's GpuWatch)."""

    def on_oom(self, rank: int, pid: int, record: OomRecord) -> object: ...


class ReportLedger:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog,
                 live: LiveSink | None = None, oom: OomSink | None = None,
                 rank_of: Callable[[int], int | None] | None = None):
        """rank_of(pid): the rank the run's marks give a process (supervisor.workers.marks), for
        the hellos of a rank's daemonised children."""
        self.workers = workers
        self.lock = lock
        self.log = log
        self.live = live
        self.oom = oom
        self.rank_of = rank_of
        self.refused_hellos = 0
        self._starting: set[int] = set()  # ranks whose process the main thread is starting
        self._held: dict[int, list[tuple[_Handle, Peer, dict[str, Any]]]] = {}

    # ---------------------------------------------------------- hub callbacks ----
    def check_hello(self, peer: Peer, cred: int | None) -> str | None:
        """Why a hello is not taken: its channel is not of the rank and pid it names (the
        connecting process `cred`: supervisor.ipc.identity); said by an event now and then, and
        noted on the rank the process belongs to. None: taken."""
        with self.lock:
            w = self.workers.get(peer.rank)
            worker = w.pid if w is not None else None
        # (a rank's first process may say hello before the main thread has it: its marks say whose it is)
        why = identity.refusal(peer.rank, peer.pid, cred, worker, self.rank_of)
        if why is None:
            return None
        with self.lock:
            self.refused_hellos += 1
            count = self.refused_hellos
            true_rank = self._rank_of_pid(cred)
        if true_rank is not None:
            self.note_bad_input(true_rank, f"a channel of its claimed rank {peer.rank} (pid {peer.pid}), "
                                           f"refused: {why}")
        if count <= REFUSALS_SAID or count % 100 == 0:
            self.log.event(Event.CHANNEL_REFUSED, peer.rank, pid=cred, claimed_pid=peer.pid, why=why,
                           count=count)
        return why

    def _rank_of_pid(self, pid: int | None) -> int | None:
        """Under the lock: the rank a process belongs to (its worker, an ancestor's, or its marks)."""
        if pid is None:
            return None
        by_pid = {w.pid: r for r, w in self.workers.items() if w.pid is not None}
        for p in (pid, *identity.ancestors(pid)):
            if p in by_pid:
                return by_pid[p]
        return self.rank_of(pid) if self.rank_of is not None else None

    # A rank being started may already speak: a forked worker connects and reports within a
    # millisecond, before the main thread has its pid. What its rank's channels say meanwhile waits,
    # in order, until `adopt` (then the pid tells the rank's own process from a child's).
    def starting(self, rank: int) -> None:
        """The main thread starts a process for the rank."""
        with self.lock:
            self._starting.add(rank)

    def adopt(self, rank: int) -> None:
        """The main thread has given the rank its new process (or failed to): what waited is
        handled now, in order, under the lock (the hub's next words wait for it)."""
        with self.lock:
            self._starting.discard(rank)
            for handle, peer, msg in self._held.pop(rank, []):
                with boundary.rank_input(rank, "its channel's first words"):
                    try:
                        handle(peer, msg)
                    except protocol.BadFrame as exc:  # what the hub does with it
                        self.on_bad(peer, str(exc))

    def _wait_start(self, peer: Peer, handle: _Handle, msg: dict[str, Any]) -> bool:
        """Under the lock: True when the rank is being started (the message waits for `adopt`)."""
        if peer.rank not in self._starting:
            return False
        held = self._held.setdefault(peer.rank, [])
        if len(held) < HELD_MAX:  # past it, a start that never ends: dropped
            held.append((handle, peer, msg))
        return True

    def on_hello(self, peer: Peer, msg: dict[str, Any]) -> None:
        with self.lock:
            if self._wait_start(peer, self.on_hello, msg):
                return
            w = self.workers.get(peer.rank)
            if w is None:
                return
            a = w.attempt
            if peer.pid == a.pid:
                a.chan_open += 1
                # a quiet hello (protocol.HELLO) promises no reports: none is waited for
                a.connected = a.connected or msg.get("quiet") is not True
                if w.state is State.STARTING:
                    w.transition(State.RUNNING, "hello")
            else:
                ppid = msg.get("ppid")
                a.children.setdefault(peer.pid, ChildReport(peer.pid, ppid if type(ppid) is int else None))
                return
        if self.live is not None:
            with boundary.room("live room"):
                self.live.on_hello(w, peer, peer.version)

    def on_close(self, peer: Peer) -> None:
        with self.lock:
            if self._wait_start(peer, lambda p, _m: self.on_close(p), {}):
                return
            w = self.workers.get(peer.rank)
            if w is not None and peer.pid == w.pid:
                w.attempt.chan_open = max(0, w.attempt.chan_open - 1)
                if w.attempt.peer is peer:
                    w.attempt.peer = None

    def on_bad(self, peer: Peer, why: str) -> None:
        with self.lock:
            w = self.workers.get(peer.rank)
            if w is None:
                return
            w.reports.bad_frames += 1
            count = w.reports.bad_frames
        if count in BAD_FRAME_EVENTS:
            self.log.event(Event.BAD_FRAME, w.rank, pid=peer.pid, why=why, count=count)

    def note_bad_input(self, rank: int, why: str) -> int | None:
        """An input of the rank tripped a handler (supervisor.boundary): counted, with why; the
        count so far (None: no such rank)."""
        with self.lock:
            w = self.workers.get(rank)
            if w is None:
                return None
            w.reports.bad_inputs += 1
            w.reports.bad_input_why = why
            return w.reports.bad_inputs

    def on_rejected(self, peer: Peer, reasons: list[str]) -> None:
        """Reports of a batch refused alone: counted on the rank, said by an event now and then."""
        with self.lock:
            w = self.workers.get(peer.rank)
            if w is None:
                return
            before = w.reports.rejected
            w.reports.rejected += len(reasons)
            w.reports.rejected_why = reasons[-1]
            count = w.reports.rejected
        if any(before < n <= count for n in BAD_FRAME_EVENTS):
            self.log.event(Event.REPORTS_REJECTED, w.rank, pid=peer.pid, why=reasons[-1], count=count)

    def on_refused(self, peer: Peer, refused: list[str]) -> None:
        """Tunable declarations of a rank refused alone: kept for its status (the first few, one
        per name: contract.live.keep_refused), and a tunable_refused event for each kept, so
        that a replay shows them too."""
        with self.lock:
            w = self.workers.get(peer.rank)
            if w is None:
                return
            added = [r for r in refused if keep_refused(w.reports.refused_tunables, r)]
        for r in added:
            name, _, why = r.partition(": ")
            self.log.event(Event.TUNABLE_REFUSED, w.rank, pid=peer.pid, tunable=name, why=why)

    def on_frame(self, peer: Peer, msg: dict[str, Any]) -> None:
        """Apply one frame; anything malformed raises protocol.BadFrame (counted by the hub)."""
        # (read unlocked first: a frame is this hot path's every call, a starting rank a rare one; a
        # rank is marked starting before its process exists, and _wait_start looks again under the lock)
        if peer.rank in self._starting:
            with self.lock:
                if self._wait_start(peer, self.on_frame, msg):
                    return
        t = msg.get("t")
        if t == protocol.BYE:
            return
        if t != protocol.BATCH:
            raise protocol.BadFrame(f"unknown message type {t!r}")
        rejected: list[str] = []  # reports refused alone: the rest of the batch is applied
        reports: list[Report] = validate_batch(msg, rejected)
        if rejected:
            self.on_rejected(peer, rejected)
        dropped, phases, cuda = msg.get("dropped", 0), msg.get("phases"), msg.get("cuda")
        dist = msg.get("dist", False)
        if type(dropped) is not int or (phases is not None and not isinstance(phases, dict)) \
                or type(dist) is not bool:
            raise protocol.BadFrame("batch fields of the wrong type")
        refused: list[str] = []  # tunable declarations refused alone: the others are kept
        entries = validate_live(msg["live"], refused) if "live" in msg else None
        if refused:
            self.on_refused(peer, refused)
        ooms = validate_oom(msg["oom"]) if "oom" in msg else []
        now = time.monotonic()
        write = False
        child_step: int | None = None
        child_loss: float | None = None
        with self.lock:
            w = self.workers.get(peer.rank)
            if w is None:
                return
            child_of = w.pid
            if peer.pid != child_of:
                child_step, child_loss = self._on_child(w, peer.pid, reports, now)
            else:
                w.attempt.dist = w.attempt.dist or dist
                self._apply(w, reports, dropped, phases, cuda, now)
                ooms = [m for m, new in map(w.attempt.take_oom, ooms) if new and m["alloc"] is not None]
                if reports:
                    w.reports.source = "auto" if msg.get("auto") is True else "report"
                    self._hold(w, reports, dropped)
                    write = now >= w.reports.next_event
        if child_of != peer.pid and reports:
            self.log.report(peer.rank, reports[-1].ts, eventlines.report_fields(
                child_step, child_loss, _merged_metrics(reports, None), sum(x.n for x in reports), dropped,
                child=(peer.pid, child_of)))
        elif write:
            self.write_report(w, now)
        if entries and child_of == peer.pid and self.live is not None:
            self.live.on_entries(w, entries)
        if child_of == peer.pid:
            self._tell_ooms(w.rank, peer.pid, ooms)

    def _tell_ooms(self, rank: int, pid: int, new: list[OomRecord]) -> None:
        """The new OOMs of a batch to the GPU watcher (outside the run's lock: it takes its own);
        a record that only completes one (an uncaught error's message) waits for the exit."""
        if self.oom is not None:
            for rec in new:
                with boundary.rank_input(rank, "its CUDA OOM record"):
                    self.oom.on_oom(rank, pid, rec)

    def _on_child(self, w: Worker, pid: int, reports: list[Report],
                  now: float) -> tuple[int | None, float | None]:
        """A batch of a process the worker started (under the lock): its own row, and never the
        worker's heartbeat, so a busy child cannot hide a stuck worker. Its latest step and loss."""
        c = w.attempt.children.get(pid)
        if c is None:
            c = w.attempt.children[pid] = ChildReport(pid)
        if reports:  # its latest step and loss: a report of metrics only keeps them
            c.step, c.loss, c.last_report = _latest(reports, c.step, c.loss) + (now,)
            w.attempt.slow_start = None  # the rank has started: its children train (Hogwild)
        return c.step, c.loss

    # ----------------------------------------------------------------- applying ----
    def _apply(self, w: Worker, reports: list[Report], dropped: int, phases: dict[str, Any] | None,
               cuda: object, now: float) -> None:
        """Fold a worker's batch into its row (under the lock)."""
        r, a = w.reports, w.attempt
        step, loss, count = r.step, r.loss, r.count  # locals: this loop runs for every report
        tail, trend, curve = r.tail.append, r.trend.add, r.curve.add
        left = 0  # metric names past the rank's bounds
        for _, s, x, metrics, n in reports:
            if s is not None:
                step = s
            if x is not None:
                loss = x
                tail(x)
                trend(x)
                curve(s if s is not None else count, x)
            if metrics:
                left += keep_metrics(r.metrics, metrics)
            count += n
        r.step, r.loss, r.count = step, loss, count
        r.dropped += max(0, dropped)
        if left:
            self._past_bounds(w, f"{left} metric name(s) past the {METRICS_KEPT} a rank keeps, or not "
                                 "printable")
        if phases:
            r.phases, left = keep_phases(phases, r.phase_names)
            if left:
                self._past_bounds(w, f"{left} phase name(s) past the {PHASES_KEPT} a rank keeps, or not "
                                     f"printable, or of a total that is no number")
        if cuda is not None:  # sent at most once a second: a batch without it keeps the last
            r.cuda = validate_cuda(cuda)  # checked here, where it enters: None when malformed
        if not reports:
            return
        a.connected = True  # a quiet channel's script may report after all
        if a.first_report is None:
            a.first_report = now
            a.slow_start = None  # it reports now: a slow start is over
            Worker.moves += 1  # its stall clock starts (supervisor.diagnose.stall_watch)
        a.last_report = now
        if r.step is not None:
            a.rate.append((now, r.step))
        if w.state is State.STALLED:
            a.stall = None
            w.transition(State.RUNNING, "reports again", step=r.step)
        elif w.state is State.STARTING:
            w.transition(State.RUNNING, "first report")

    def _past_bounds(self, w: Worker, why: str) -> None:
        """Under the lock: what a rank declared past its bounds, left out: a note on it."""
        boundary.current().note(w.rank, "its declarations", why)

    def _hold(self, w: Worker, reports: list[Report], dropped: int) -> None:
        """The latest report becomes the pending event, merged with one still held back."""
        r = w.reports
        prev = r.pending
        r.pending = PendingReport(
            ts=reports[-1].ts, step=r.step, loss=r.loss,
            metrics=_merged_metrics(reports, prev.metrics if prev else None),
            n=sum(x.n for x in reports) + (prev.n if prev else 0),
            dropped=dropped + (prev.dropped if prev else 0), phases=dict(r.phases) if r.phases else None)

    # ------------------------------------------------------------ report events ----
    def write_report(self, w: Worker, now: float) -> None:
        """The pending report as an event; it is also a sample of the rank's pace (contract.pace:
        the same samples a replay reads back)."""
        with self.lock:
            rec, w.reports.pending = w.reports.pending, None
            w.reports.next_event = now + REPORT_EVENT_S
            if rec is not None:
                w.attempt.pace.add(rec.ts, rec.step, rec.phases, as_number(rec.metrics.get(WORK_METRIC)))
        if rec is not None:
            self.log.report(w.rank, rec.ts, eventlines.report_fields(rec.step, rec.loss, rec.metrics, rec.n,
                                                                     rec.dropped, phases=rec.phases))

    def flush(self, now: float) -> None:
        """Main loop: write reports held back by the rate limit once their slot comes."""
        for w in list(self.workers.values()):
            if w.reports.pending is not None and now >= w.reports.next_event:
                self.write_report(w, now)


def _latest(reports: list[Report], step: int | None, loss: float | None) -> tuple[int | None, float | None]:
    """The last step and the last loss a batch gave, each kept from before when it gave none."""
    for r in reports:
        if r.step is not None:
            step = r.step
        if r.loss is not None:
            loss = r.loss
    return step, loss


def _merged_metrics(reports: list[Report], into: dict[str, Any] | None) -> dict[str, Any]:
    """Every metric of a batch (within a rank's bounds: batch_check.keep_metrics), later values
    winning; `into` (a pending event's) first."""
    out = dict(into) if into else {}
    for r in reports:
        if r.metrics:
            keep_metrics(out, r.metrics)
    return out
