"""The run's lifecycle: setup, the serve loop, starts, exits, restarts, resize, finish.

The rooms it drives, each with one job:
- supervisor.workers.worker + supervisor.workers.states: a rank, its attempt per start, and the state machine;
- supervisor.workers.groups: process groups and their kills (and the watchdog);
- supervisor.workers.reaping: the exit path: ended processes judged, restarts that are due;
- supervisor.workers.ledger: the report ledger: what the workers' batches say, folded into their rows;
- supervisor.ipc: transport only: the channel hub (ipc.channels) hands the ledger each frame, the
  control server (ipc.ctl_server) hands supervisor.commands each request;
- supervisor.commands: the control commands: what a client asks of the run;
- supervisor.snapshot: the status (contract.status's Status) clients read;
- supervisor.eventlog: events.jsonl, the recent events and the run alerts;
- supervisor.diagnose.stall_watch: stalled workers, what they do, and the rank the others wait for;
- supervisor.diagnose.straggler_watch: the rank that makes the others wait at every step;
- supervisor.diagnose.slowdown_watch: the run slower than its own best, and what took the machine;
- supervisor.resize: the first launch and the `resize` command, starting (and stopping) ranks over
  the ticks;
- supervisor.live.room: the live requests: "checkpoint now", profiles and tunables, sent down the
  workers' channels at one step;
- supervisor.records: run.json, the run's registry entry and how each rank ended;
- supervisor.diagnose.sampler, supervisor.diagnose.dumps, supervisor.gpu.watch: the process sampler,
  stack dumps, the GPU watcher.

Threads and who owns what:
- the main thread runs `serve()`: it alone starts, signals and reaps processes (the
  parent-death signal is tied to the thread that forked), and it runs every control
  command that touches a process (supervisor.commands hands them over);
- the channel hub's threads apply worker reports under `lock` (supervisor.workers.ledger);
- the control server's threads answer read-only requests under `lock`;
- the sampler, the GPU watcher and dump threads run on their own.
Nothing here blocks on a worker: kills are deadlines checked each tick.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from mpwatch.contract import Event, RunState, State, Status, protocol
from mpwatch.rundir import claim, layout, registry, writer
from mpwatch.settings import Settings
from mpwatch.supervisor import boundary, errors, metrics, records, snapshot, spawn
from mpwatch.supervisor.commands import Commands
from mpwatch.supervisor.diagnose.dumps import Dumper
from mpwatch.supervisor.diagnose.sampler import Sampler
from mpwatch.supervisor.diagnose.slowdown_watch import SlowdownWatch
from mpwatch.supervisor.diagnose.stall_watch import StallWatch
from mpwatch.supervisor.diagnose.straggler_watch import StragglerWatch
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.supervisor.headless import Reporter
from mpwatch.supervisor.ipc.channels import ChannelHub
from mpwatch.supervisor.ipc.ctl_server import CtlServer
from mpwatch.supervisor.live.flame import FlameRecorder
from mpwatch.supervisor.live.room import LiveRoom
from mpwatch.supervisor.nodes.cluster import Nodes
from mpwatch.supervisor.options import Options as Options  # re-exported: the CLI builds one
from mpwatch.supervisor.preload.launcher import Launcher
from mpwatch.supervisor.resize import Resize
from mpwatch.supervisor.workers.groups import LEFTOVER_GRACE_S, ProcessGroups
from mpwatch.supervisor.workers.ledger import ReportLedger
from mpwatch.supervisor.workers.marks import Marks
from mpwatch.supervisor.workers.reaping import Reaper
from mpwatch.supervisor.workers.worker import TAIL, Attempt, Worker

if TYPE_CHECKING:
    from mpwatch.supervisor.metrics.server import MetricsServer

TICK_S = 0.1
# the disk kept for final.json and run.json's end (rundir.writer's reserve): a status is ~5 KB a rank
RESERVE_BASE, RESERVE_PER_RANK, RESERVE_MAX = 128 << 10, 16 << 10, 8 << 20
FLUSH_S = 0.5  # events.jsonl flushed, the disk checked, the headless summary considered


def _claimed(opts: Options, taken: claim.Claim | None, tmpdir: Path) -> tuple[claim.Claim | None, str, Path]:
    """The run's claim (`taken`, or one taken now unless a launcher made the directory), id and
    directory; registry.RunError when a launcher's directory comes without its id or path."""
    if taken is None and opts.made_run_dir is None:
        taken = claim.claim(opts.script, opts.nprocs, opts.cwd, tmpdir, opts.run_dir, opts.run_id)
    if taken is not None:
        return taken, taken.run_id, taken.run_dir
    if opts.run_id is None or opts.run_dir is None:
        raise registry.RunError("a run directory made by a launcher comes with its run id and path")
    return None, opts.run_id, Path(opts.run_dir)


class Run:
    def __init__(self, opts: Options, settings: Settings, status_out: Reporter | None = None,
                 taken: claim.Claim | None = None):
        """Names the run and builds its rooms; starts nothing but the claim on its id and
        directory (rundir.claim): `taken`, the CLI's, or one taken here, unless a launcher made
        the directory (opts.made_run_dir: the supervisor's own process then checks it is that
        one). settings: the MPWATCH_* switches the CLI read, handed to the rooms. Raises
        registry.RunError when the run cannot be claimed or there is no usable runtime directory."""
        self.opts = opts
        self.settings = settings
        self.status_out = status_out  # a headless Reporter, or None
        self.lock = threading.RLock()
        self.workers: dict[int, Worker] = {}
        self.world = opts.nprocs
        self.env_added, self.env_note = spawn.openmp(os.environ, opts.nprocs)  # in each worker's environment
        self.master_port = opts.master_port or spawn.free_port()
        self.authkey = os.urandom(32)
        self.state = RunState.RUNNING
        self.started_wall, self.started = time.time(), time.monotonic()
        self.exit_code: int | None = None
        self.stopped_why: str | None = None  # why the run was stopped (a stop asked, a signal), once it was
        self.restarts_total = 0
        self._signals: list[int] = []
        self._registered = False
        self._log_file: logging.Handler | None = None  # supervisor.log (supervisor.errors)
        rt = registry.runtime_dir(self.settings.tmpdir)
        self.claim, self.run_id, self.run_dir = _claimed(opts, taken, self.settings.tmpdir)
        self.store = writer.RunStore(self.run_dir, self.settings)
        self.log = EventLog(self.store, status_out)
        self.marks = Marks(self.run_id, os.getpid())  # every process of the run (supervisor.workers.marks)
        self.groups = ProcessGroups(self.workers, self.lock, self.log, opts.stop_signal, self.marks)
        self.live = LiveRoom(self.workers, self.lock, self.log, self.flush_interval, self.store,
                                   FlameRecorder(self.store, settings.pyspy, self.run_id))
        self.gpu = GpuWatch.for_run(self)  # NVML starts on its own thread (setup): never waited on
        self.ledger = ReportLedger(self.workers, self.lock, self.log, self.live, self.gpu,
                                   self.marks.rank_of)
        # the fault boundary: a room's fault said once, a rank's bad input counted on it (attached in setup)
        self.boundary = boundary.Boundary(self.log, self.ledger)
        self.store.on_bug = self.boundary.failed  # the store's thinning thread is a room too
        self.hub = ChannelHub(str(rt / f"{self.run_id}.chan"), self.authkey, self.ledger)
        self.dumper = Dumper(self.store, self.lock, self.log, self.settings)
        self.commands = Commands(self, self.workers, self.lock, opts, self.store, self.log, self.dumper,
                                 self.gpu, self.live)
        self.ctl_server = CtlServer(str(rt / f"{self.run_id}.ctl"), self.authkey, self.commands.dispatch)
        self.sampler = Sampler(self.workers, self.lock, self.groups)
        self.stalls = StallWatch(self.workers, self.lock, self.log, self.dumper, opts.stall_timeout,
                                 opts.startup_timeout)
        self.resizing = Resize(self)  # starts ranks over the ticks: the first launch, a round, a resize
        self.nodes = Nodes(opts.nodes, self, self.resizing) if opts.nodes is not None else None
        self.stragglers = StragglerWatch(self.workers, self.lock, self.log, self._global_rank, self.gpu)
        self.slowdowns = SlowdownWatch(self.workers, self.lock, self.log, self._global_rank, self.gpu)
        self.reaper = Reaper(self)  # the exit path: ended processes, restarts due
        self.launcher = Launcher(opts, self.log)  # workers forked by the forkserver, or exec'd
        self.metrics: MetricsServer | None = None  # --metrics-port (supervisor.metrics)
        self.metrics_at: str | None = None  # host:port Prometheus scrapes, once serving
        self.ticked = time.monotonic()  # the serve loop's last turn (the metrics' /healthz)

    # ----------------------------------------------------------------- setup ----
    def setup(self) -> None:
        """Create the run directory, open the sockets, start every worker. On failure
        (registry.RunError: one line for the user) whatever was made is released."""
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        o, run_dir = self.opts, self.run_dir
        for listener in (self.hub, self.ctl_server):  # before anything is made
            if len(os.fsencode(listener.address)) > registry.SOCKET_PATH_MAX:
                raise registry.RunError(f"cannot make the run's socket {listener.address}: its path passes "
                                        f"{registry.SOCKET_PATH_MAX} bytes (a shorter XDG_RUNTIME_DIR, or "
                                        "MPWATCH_TMPDIR without it, makes room)")
        self._catch_signals()
        try:
            self.store.create(self.claim.fd if self.claim is not None else None, o.made_run_dir)
        except OSError as exc:
            raise registry.RunError(f"cannot use run directory {run_dir}: {exc.strerror or exc}") from None
        self.store.reserve(min(RESERVE_MAX, RESERVE_BASE + RESERVE_PER_RANK * o.nprocs))
        self._log_file = errors.attach(self.store)
        boundary.attach(self.boundary)
        errors.LOG.info("run %s: supervisor pid %d, %d worker(s) of %s", self.run_id, os.getpid(), o.nprocs,
                        o.script)
        self.marks.open()
        self.groups.start_watchdog()
        self.hub.start()
        self.ctl_server.start()
        self.metrics = metrics.serve(o.metrics_addr, o.metrics_port, lambda: snapshot.build(self, 0),
                                     lambda: self.ticked)
        self.metrics_at = self.metrics.where if self.metrics is not None else None
        me = (self.opts, self.run_id, self.run_dir, self.started_wall)
        self.store.write_json(layout.RUN_JSON, records.run_json(*me))
        self.store.write_json(layout.CONTROL_JSON, {
            "run_id": self.run_id, "address": self.ctl_server.address, "authkey": self.authkey.hex(),
            "pid": os.getpid()})
        self.gpu.start()
        registry.register(self.run_id, records.registry_entry(*me), self.settings.tmpdir)
        self._registered = True
        # stamped with run.json's start, so a replay puts the run's first event at +0.0s (not at
        # the time setup took, 0.1 s under load)
        self.log.event(Event.RUN_STARTED, ts=self.started_wall, script=o.script, args=o.args,
                       nprocs=o.nprocs, run_dir=str(run_dir), pid=os.getpid())
        if self.env_note is not None:
            if self.status_out is not None:
                self.status_out.note(self.env_note)
            if self.status_out is None or not errors.is_stderr(self._log_file):  # once in supervisor.log
                errors.LOG.info("%s", self.env_note)
        self.sampler.start()
        self.launcher.open(spawn.forkserver_env(self.base_env(), self.run_id, self.settings.nccl_flight))
        self.marks.helper = self.launcher.pid  # the forkserver carries the run's marks: never a leftover
        if self.nodes is not None:
            self.nodes.start()  # the workers start once torch's rendezvous has formed the first round
        else:
            self.resizing.launch(o.nprocs)  # a few a tick (supervisor.resize): a stop cancels the rest

    # ------------------------------------------------------------- starting ----
    def base_env(self) -> dict[str, str]:
        """What a worker's environment (and the forkserver's) is made from: this process's, now
        (a node's rendezvous sets a variable in it), and what the run adds (spawn.openmp)."""
        return {**os.environ, **self.env_added}

    def start(self, rank: int, reason: str | None = None) -> None:
        """Start rank's process: its first start, or again (`reason`: restarted, resized)."""
        o = self.opts
        if reason is not None:
            self.store.mark_logs(rank, f"rank {rank} {reason} at {time.strftime('%H:%M:%S')}")
        paths, w = self.store.rank_paths(rank), self.workers.get(rank)
        place = self.nodes.placement(rank) if self.nodes is not None else spawn.one_node(
            o, rank, self.world, self.master_port, self.run_id, restarts=0 if w is None else w.restarts)
        env = spawn.worker_env(self.base_env(), place, channel=self.hub.address, authkey=self.authkey,
                               run_id=self.run_id, rank_dir=paths.dir, stack_file=paths.stack_file,
                               virtual_local_rank=o.virtual_local_rank, flush_s=self.flush_interval(),
                               nccl_flight=self.settings.nccl_flight, auto=o.auto and self.settings.auto,
                               cuda_history=self.settings.cuda_history_entries if o.cuda_history else 0)
        if o.cuda_history:
            self.store.action_dir(rank, layout.MEMORY)  # where an OOM's snapshot goes
        live_from = self.live.spawn_env(env, rank)
        self.ledger.starting(rank)  # a fork speaks before its pid is known here: held till adopt
        try:
            try:
                with self.store.open_log(rank, "stdout") as out, self.store.open_log(rank, "stderr") as err:
                    argv = spawn.command(o.launch, o.script, o.args)
                    proc = self.launcher.start(argv, env, out, err, cwd=o.cwd)
            except OSError as exc:
                cause = f"could not start: {exc.strerror}"
                self._begin(rank, Attempt(None, place.world, cause=cause), State.FAILED, "could not start",
                            pid=None, exit_code=None, signal=None, cause=cause, reason=None, stderr_tail=[])
                return
            self.reaper.watch(proc)
            self.groups.watch(proc.pid, rank)
            self.marks.join(proc.pid, rank)
            self._begin(rank, Attempt(proc, place.world, live_from=live_from), State.STARTING,
                        reason or "first start", pid=proc.pid, world_size=place.world,
                        master_port=place.master_port, global_rank=place.rank,
                        attempt=0 if w is None else w.restarts)
        finally:
            self.ledger.adopt(rank)

    def _begin(self, rank: int, attempt: Attempt, state: State, why: str, /, **fields: Any) -> None:
        with self.lock:
            w = self.workers.get(rank)
            if w is None:
                strict = self.settings.strict_states
                self.workers[rank] = Worker(rank, attempt, state, why, self.log, strict=strict, **fields)
            else:
                w.begin(attempt, state, why, **fields)

    def restart(self, w: Worker, why: str) -> None:
        """Start a worker's next attempt, counted, and say so (its last process is gone)."""
        w.restarts += 1
        self.restarts_total += 1
        self.start(w.rank, reason="restarted")
        self.log.event(Event.RESTARTED, w.rank, attempt=w.restarts, pid=w.pid, why=why)

    # --------------------------------------------------------------- exits ----
    def kill(self, w: Worker, reason: str) -> bool:
        """TERM now, KILL after the grace period (supervisor.workers.groups); False when it is not running."""
        return self.groups.kill(w, reason, self.opts.grace)

    def resize(self, n: int) -> str:
        """The `resize` command (main thread, supervisor.resize): raises errors.CommandError when it
        cannot."""
        return self.resizing.begin(n)

    # ------------------------------------------------------------ the loop ----
    def _catch_signals(self) -> None:
        """Before the run is announced (control.json, the registry): a signal from then on is a
        stop the loop makes, never the supervisor's death by a default action."""
        # USR1 and USR2 stop the run too: a batch system's warning (Slurm's --signal) must not
        # kill the supervisor by their default action, and a stop is what such a warning means.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal never ends the run
        self.commands.waker.arm()  # a signal, a child's end: the loop wakes at once (supervisor.waker)

    def serve(self) -> int:
        """The policy loop: each room's turn runs behind the fault boundary (supervisor.boundary),
        so a room that fails is said once and the run goes on."""
        next_flush = 0.0
        room = self.boundary.room
        while self.state is not RunState.FINISHED:
            self.ticked = time.monotonic()
            wait = self.boundary.call("control commands", self._wait_s, default=TICK_S)
            if not self.boundary.call("control commands", self._next_command, wait, default=False):
                time.sleep(wait)  # the loop's pace, which the command queue's wait gives it
            with room("signals"):
                self._handle_signals()
            with room("launcher"):
                self.launcher.tick()  # the forkserver's word: a worker forked, or the fallback to exec
            with room("report ledger"):
                self.ledger.flush(time.monotonic())
            with room("live room"):
                self.live.push()
            with room("reaper"):
                self.reaper.poll()  # each rank's exit behind a boundary of its own (workers.reaping)
            if self.nodes is not None:
                with room("nodes"):
                    self.nodes.tick()  # a round joined, a stop or a lost node found by the node thread
            if self.state is not RunState.STOPPING:  # while stopping, ranks going quiet are no news
                with room("stall watch"):
                    self.stalls.check(time.monotonic())
                with room("straggler watch"):
                    self.stragglers.check(time.monotonic())
                with room("slowdown watch"):
                    self.slowdowns.check(time.monotonic())
            with room("launch"):
                self.resizing.advance()
            with room("end of the run"):
                self._check_finished()
            if time.monotonic() >= next_flush:
                next_flush = time.monotonic() + FLUSH_S
                with room(boundary.EVENTLOG):
                    self._flush()
                if self.status_out is not None:
                    with room("headless status"):
                        self.status_out.tick(self)
        return self.exit_code if self.exit_code is not None else 1

    def _wait_s(self) -> float:
        """How long the loop may wait for a command: a tick, less while ranks start or end."""
        return min(self.resizing.wait_s(TICK_S), self.reaper.wait_s(TICK_S))

    def _next_command(self, wait: float) -> bool:
        """Run a control command that waits, waiting `wait` at most (or a signal, a child's end,
        the forkserver's word: supervisor.waker)."""
        self.commands.run_next(wait, self.launcher.fds())
        return True

    def _flush(self) -> None:
        self.store.flush()
        if self.store.disk_error and not self.log.has_alert("disk"):
            self.log.alert("disk", self.store.disk_error + "; the run goes on")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)  # handled by the loop: never lock inside a handler

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if self.state is RunState.STOPPING:  # a second Ctrl-C: no waiting for the grace period
                for w in self.workers.values():
                    self.groups.kill_now(w)
            else:
                self.stop(f"signal {signal.Signals(signum).name}")

    def stop(self, why: str) -> int:
        """Stop every worker (TERM, grace, KILL); the number that were running."""
        with self.lock:
            self.state = RunState.STOPPING
        if self.stopped_why is None:
            self.stopped_why = why
        self.resizing.cancel()  # ranks a resize has yet to start are never started
        for w in self.workers.values():
            w.pending_restart = None
        with self.boundary.room("straggler watch"):
            self.stragglers.close()  # a standing straggler's last numbers (its cost) go to the events
        with self.boundary.room("slowdown watch"):
            self.slowdowns.close()  # and a standing slowdown's
        self.log.event(Event.STOPPING, why=why)
        if self.nodes is not None:
            with self.boundary.room("nodes"):
                self.nodes.on_stop(why)  # through the rendezvous store to every other node
        grace = self.opts.grace
        running = sum(1 for w in list(self.workers.values())
                      if self.groups.kill(w, "stop", grace, sweep=False))
        self.groups.adopt_marked(None, time.monotonic() + grace)  # what left its worker's tree
        return running

    def _check_finished(self) -> None:
        if self.state is RunState.FINISHED:
            return
        # A worker we gave up on (unkillable, already reported) must not hold the run open forever.
        if any((w.alive and w.attempt.unkillable is None) or w.pending_restart
               for w in self.workers.values()):
            return
        if self.state is RunState.RESIZING or self.resizing.busy() or self.groups.ending():
            return
        if self.nodes is not None and (self.nodes.busy() or not self.nodes.may_finish()):
            return  # between two rounds, or waiting for the other nodes to end (torchrun's exit barrier)
        if self.groups.adopt_marked(None, time.monotonic() + LEFTOVER_GRACE_S):
            return  # a process of the run outlived its worker (a daemon): ended first
        self._finish()

    def _finish(self) -> None:
        # 0 only when every rank ended by itself, with 0: one mpwatch stopped did not finish its work,
        # even where it exited 0 on the stop signal
        ok = all(w.state is State.EXITED and w.attempt.exit_code == 0 and w.attempt.kill_reason is None
                 for w in self.workers.values())
        self.exit_code = 0 if ok and self.workers else 1
        with self.lock:
            self.state = RunState.FINISHED
        stopped: dict[str, Any] = {"stopped": self.stopped_why} if self.stopped_why is not None else {}
        with self.boundary.room("end of the run"):
            self.log.event(Event.RUN_FINISHED, None, exit_code=self.exit_code,
                           workers=records.ends(self.workers.values()), **stopped)
        self.store.release_reserve()  # the room kept for the run's last files, should the disk be full
        final = self.boundary.call("snapshot", self.snapshot, default=None)
        if not self.store.write_json(layout.FINAL_JSON, final if final is not None else snapshot.bare(self)):
            # said where it can be: the headless lines, the TUI's launch log, supervisor.log
            said = f"disk full: {layout.FINAL_JSON} could not be written ({self.store.disk_error})"
            self.log.alert("disk", said)
            errors.LOG.warning("%s", said)
        self.store.update_json(layout.RUN_JSON, finished=time.time(), exit_code=self.exit_code)
        self.close()

    def close(self) -> None:
        """Release what the run holds; safe after a setup that failed half-way."""
        self.sampler.close()
        self.hub.close()
        self.ctl_server.close()
        if self.metrics is not None:
            self.metrics.close()
        self.gpu.close()
        if self.nodes is not None:
            self.nodes.close()
        if self._registered or self.claim is not None:  # the entry, or the claim's reservation of it
            registry.unregister(self.run_id, self.settings.tmpdir)
            self._registered = False
            self.claim = None
        self.launcher.close()
        self.reaper.exits.close()
        self.commands.waker.close()
        self.groups.close()
        self.store.flush()
        self.store.close()
        if self._log_file is not None:
            errors.LOG.info("run %s: ended with exit code %s", self.run_id, self.exit_code)
            errors.detach(self._log_file)
            self._log_file = None
        boundary.detach(self.boundary)

    # ------------------------------------------------------------- readers ----
    def event(self, name: Event | str, rank: int | None = None, **fields: Any) -> dict[str, Any]:
        """Record an event (the GPU watcher's way in: supervisor.gpu.watch's for_run)."""
        return self.log.event(Event(name), rank, **fields)

    def flush_interval(self) -> float:
        """How often the workers' senders ship a batch (protocol.flush_interval, by the run's size)."""
        return protocol.flush_interval(self.world, self.opts.stall_timeout)

    def _global_rank(self, rank: int) -> int:
        return rank if self.nodes is None else self.nodes.global_rank(rank)

    def snapshot(self, tail: int = TAIL) -> Status:
        return snapshot.build(self, tail)

    def refused_connections(self) -> int:
        return self.hub.refused + self.ctl_server.refused

