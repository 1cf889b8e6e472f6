"""The run: workers' lifecycle, channels, stall detection, restarts, resize, control.

Threads and who owns what:
- the main thread runs `serve()`: it alone starts, signals and reaps processes (so the
  parent-death signal is tied to a thread that lives as long as the run), and it runs
  every control command, which other threads submit through `_commands`;
- the channel hub's threads apply worker reports under `lock`;
- the control server's threads answer read-only requests under `lock`;
- the sampler thread runs the process probe once a second.
Nothing here blocks on a worker: kills are deadlines checked each tick.
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from mpwatch import protocol, registry, runstore
from mpwatch.probes import hang, procs, stacks
from mpwatch.supervisor import flight, spawn, stall, straggler
from mpwatch.supervisor.channels import ChannelHub
from mpwatch.supervisor.control import ControlServer
from mpwatch.supervisor.gpu_watch import GpuWatch

TICK_S = 0.1
SAMPLE_S = 1.0  # CPU% and RSS of every process; twice as long past SAMPLE_WIDE workers
SAMPLE_WIDE = 32
NO_HELLO_S = 2.0  # a worker silent this long after start is shown running, "no heartbeat"
UNKILLABLE_S = 5.0  # after SIGKILL, this long before a survivor is reported
# After a worker's process ends, how long its channel may take to reach end of file: the
# frames it sent on the way out (its last reports) are read before its exit is recorded.
DRAIN_S = 0.5
HISTORY = 1024  # loss points kept per rank; halved (every other point) when full
TAIL = 32  # recent losses for the sparkline
RECENT_EVENTS = 1000  # notable events kept for clients
# events.jsonl gets a rank's latest report at most this often (n = reports it stands for,
# metrics merged); a worker's last report is always written. A point a second per rank
# draws the curve of a finished run; a live run's curves come from the in-memory history.
REPORT_EVENT_S = 1.0
STALL_PROBE_S = 2.0  # how often a stalled worker's diagnosis (busy/blocked/...) is refreshed

ALIVE = {"starting", "running", "stalled", "paused"}
ENDED = {"exited", "failed", "killed"}


@dataclass
class Options:
    script: str
    args: list
    nprocs: int
    run_dir: Path | None = None
    max_restarts: int = 0
    stall_timeout: float = 60.0
    grace: float = 10.0
    resize_mode: str = "restart"
    gpu_interval: float = 1.0
    run_id: str | None = None  # given by a launcher that chose the run directory itself
    cwd: str = field(default_factory=os.getcwd)
    argv: list = field(default_factory=lambda: list(sys.argv))


class Worker:
    """One rank's process and everything known about it."""

    def __init__(self, rank: int):
        self.rank = rank
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.state = "starting"
        self.started = 0.0  # monotonic
        self.started_wall = 0.0
        self.restarts = 0  # every restart, shown to the user
        self.auto_restarts = 0  # restarts after a failure, counted against --max-restarts
        self.exit_code: int | None = None
        self.signal: str | None = None
        self.cause: str | None = None
        self.world = 0
        # reports
        self.connected = False
        self.step = None
        self.loss = None
        self.metrics: dict = {}
        self.last_report: float | None = None  # monotonic
        self.reports = 0
        self.dropped = 0
        self.bad_frames = 0
        self.phases: dict = {}
        self.cuda: dict | None = None
        self.rate = deque(maxlen=32)  # (monotonic, step)
        self.history: list = []  # (step, loss)
        self.history_stride = 1
        self.history_skip = 0
        self.tail = deque(maxlen=TAIL)
        self.child_reports: dict[int, dict] = {}
        self.report_pending: dict | None = None  # the latest report not yet in events.jsonl
        self.report_next = 0.0  # monotonic time the next report event may be written
        # probes
        self.proc_info: dict = {}
        # control
        self.kill_reason: str | None = None
        self.kill_deadline: float | None = None
        self.hard_killed: float | None = None
        self.unkillable: list | None = None
        self.pending_restart: str | None = None  # "restart" | "auto"
        self.resumed: float | None = None
        self.stall_info: dict | None = None
        # Process groups of descendants that left the worker's group (setsid, setpgid):
        # the group kill would miss them, so they are tracked and killed on their own.
        self.foreign_groups: set[int] = set()
        self.stall_probed = 0.0  # monotonic time of the last hang.probe while stalled
        self.last_dump: str | None = None
        self.chan_open = False  # the worker's own channel is connected (hub threads set it)
        self.exit_seen: float | None = None  # its process ended; its exit waits for the channel

    @property
    def alive(self) -> bool:
        return self.proc is not None and (self.proc.returncode is None or self.exit_seen is not None)

    def add_history(self, step, loss):
        # Decimate instead of truncating, so the whole curve survives a long run.
        self.history_skip += 1
        if self.history_skip < self.history_stride:
            return
        self.history_skip = 0
        self.history.append((step, loss))
        if len(self.history) >= HISTORY:
            self.history = self.history[::2]
            self.history_stride *= 2


class Run:
    def __init__(self, opts: Options, status_out=None):
        self.opts = opts
        self.status_out = status_out  # a Reporter for --headless, or None
        self.lock = threading.RLock()
        self.workers: dict[int, Worker] = {}
        self.world = opts.nprocs
        self.master_port = spawn.free_port()
        self.authkey = os.urandom(32)
        self.state = "running"  # running | resizing | stopping | finished
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.exit_code: int | None = None
        self.restarts_total = 0
        self.resize_to: int | None = None
        self.refused = 0
        self.alerts: list[dict] = []
        self.recent: deque = deque(maxlen=RECENT_EVENTS)
        self.seq = 0
        self._commands: queue.Queue = queue.Queue()
        self._signals: list[int] = []
        self._groups: dict[int, dict] = {}  # pgid -> {deadline, killed, reported}
        self._group_rank: dict[int, int] = {}  # pgid -> rank whose process tree it belongs to
        self._wd_lock = threading.Lock()
        self._probe = procs.ProcProbe()
        self._stop_sampler = threading.Event()
        self.gpu = None  # a GPU poller (probes.gpu) when one is attached
        self.run_id = None
        self.store: runstore.RunStore | None = None

    # ----------------------------------------------------------------- setup ----
    def setup(self):
        o = self.opts
        self.run_id = o.run_id or registry.new_run_id(o.script)
        run_dir = Path(o.run_dir) if o.run_dir else Path(o.cwd) / "mpwatch-runs" / self.run_id
        if (run_dir / runstore.RUN_JSON).exists():
            raise registry.RunError(f"run directory {run_dir} already holds a run; choose another --run-dir")
        rt = registry.runtime_dir()
        self.store = runstore.RunStore(run_dir)
        try:
            self.store.create()
        except OSError as exc:
            raise registry.RunError(f"cannot create run directory {run_dir}: {exc.strerror}") from None
        self.run_dir = run_dir
        self.chan_address = str(rt / f"{self.run_id}.chan")
        self.ctl_address = str(rt / f"{self.run_id}.ctl")
        self.hub = ChannelHub(self.chan_address, self.authkey, self)
        self.control = ControlServer(self.ctl_address, self.authkey, self.dispatch)
        self.watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).with_name("watchdog.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
        info = {
            "run_id": self.run_id, "script": o.script, "args": o.args, "argv": o.argv,
            "cwd": o.cwd, "started": self.started_wall, "pid": os.getpid(),
            "options": {"nprocs": o.nprocs, "max_restarts": o.max_restarts,
                        "stall_timeout": o.stall_timeout, "grace": o.grace,
                        "resize_mode": o.resize_mode, "gpu_interval": o.gpu_interval,
                        "run_dir": str(run_dir)},
        }
        self.store.write_json(runstore.RUN_JSON, info)
        self.store.write_json(runstore.CONTROL_JSON, {
            "run_id": self.run_id, "address": self.ctl_address, "authkey": self.authkey.hex(),
            "pid": os.getpid()}, private=True)
        self.hub.start()
        self.control.start()
        self.gpu = GpuWatch.for_run(self)  # NVML starts on its own thread: setup never waits on it
        self.gpu.start()
        registry.register(self.run_id, {"run_id": self.run_id, "run_dir": str(run_dir.resolve()),
                                    "pid": os.getpid(), "script": o.script,
                                    "started": self.started_wall, "nprocs": o.nprocs})
        self.event("run_started", script=o.script, args=o.args, nprocs=o.nprocs,
                   run_dir=str(run_dir), pid=os.getpid())
        for rank in range(o.nprocs):
            self._start(rank)
        threading.Thread(target=self._sampler, name="mpwatch-sampler", daemon=True).start()

    # ---------------------------------------------------------------- events ----
    def event(self, name: str, rank=None, **fields):
        rec = self.store.event(name, rank, **fields)
        if name != "report":
            with self.lock:
                self.seq += 1
                rec = dict(rec, seq=self.seq)
                self.recent.append(rec)
            if self.status_out is not None:
                self.status_out.event(rec)
        return rec

    def alert(self, kind: str, message: str, rank=None, **fields):
        rec = {"ts": time.time(), "kind": kind, "message": message, "rank": rank, **fields}
        with self.lock:
            self.alerts.append(rec)
            del self.alerts[:-50]
        self.event("alert", rank, kind=kind, message=message, **fields)

    # ------------------------------------------------------------- processes ----
    def _start(self, rank: int, reason: str | None = None):
        o = self.opts
        w = self.workers.get(rank)
        if w is None:
            w = self.workers[rank] = Worker(rank)
        paths = self.store.rank_paths(rank)
        if reason is not None:
            for key in ("stdout", "stderr"):  # mark the restart in the logs, append-only
                try:
                    with open(paths[key], "ab") as f:
                        f.write(f"\n--- mpwatch: rank {rank} {reason} at {time.strftime('%H:%M:%S')} ---\n".encode())
                except OSError as exc:  # a full disk costs the marker, never the restart
                    self.store._failed(exc)
        env = spawn.worker_env(os.environ, rank=rank, world=self.world, master_port=self.master_port,
                                channel=self.chan_address, authkey=self.authkey, run_id=self.run_id,
                                stack_file=paths["stack_file"],
                                flush_s=protocol.flush_interval(self.world, self.opts.stall_timeout))
        if flight.enabled():
            env = flight.apply(env, paths["dir"])
        try:
            proc = spawn.start_worker(spawn.python_argv(o.script, o.args), env,
                                       paths["stdout"], paths["stderr"], cwd=o.cwd)
        except OSError as exc:
            with self.lock:
                w.state, w.cause = "failed", f"could not start: {exc.strerror}"
            self.event("worker_exited", rank, exit_code=None, signal=None, cause=w.cause, stderr_tail=[])
            return
        with self.lock:
            w.proc, w.pid = proc, proc.pid
            w.state = "starting"
            w.started, w.started_wall = time.monotonic(), time.time()
            w.world = self.world
            w.exit_code = w.signal = w.cause = None
            w.connected = False
            w.chan_open = False
            w.exit_seen = None
            w.last_report = None
            w.kill_reason = w.kill_deadline = w.hard_killed = None
            w.unkillable = None
            w.pending_restart = None
            w.resumed = None
            w.stall_info = None
            w.proc_info = {}
            w.child_reports = {}
            w.rate.clear()
        self._watch_group(proc.pid)
        self.event("worker_started", rank, pid=proc.pid, world_size=self.world,
                   master_port=self.master_port, attempt=w.restarts)

    def _watch_group(self, pgid: int):
        self._groups[pgid] = {"deadline": None, "killed": None, "reported": False, "active": False}
        self._tell_watchdog(f"+{pgid}")

    def _tell_watchdog(self, line: str):
        with self._wd_lock:
            try:
                self.watchdog.stdin.write(line.encode() + b"\n")
                self.watchdog.stdin.flush()
            except (OSError, ValueError):
                pass

    def _adopt_foreign_groups(self):
        """Register groups the sampler found under a worker (main thread only)."""
        for w in list(self.workers.values()):
            with self.lock:
                new = [g for g in w.foreign_groups if g not in self._groups]
            for pgid in new:
                self._watch_group(pgid)
                self._group_rank[pgid] = w.rank
                if w.kill_deadline is not None or not w.alive:
                    self._end_group(pgid, w.kill_deadline or time.monotonic())

    def _end_group(self, pgid: int, deadline: float):
        """TERM (and CONT) a process group now, KILL it at the deadline, report survivors."""
        g = self._groups.get(pgid)
        if g is None or g["active"]:
            return
        g["active"] = True
        g["deadline"] = deadline
        self._signal_group(pgid, signal.SIGTERM)
        self._signal_group(pgid, signal.SIGCONT)

    def _signal_group(self, pgid: int, sig: int) -> bool:
        try:
            os.killpg(pgid, sig)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return False

    def _group_alive(self, pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # killpg succeeds on zombies too; only count members that can still run.
        return bool(procs.group_members(pgid))

    def _kill(self, w: Worker, reason: str):
        """TERM (then CONT, so a paused group sees it), KILL after the grace period."""
        if not w.alive:
            return False
        with self.lock:
            w.kill_reason = reason
            w.kill_deadline = time.monotonic() + self.opts.grace
        self._signal_group(w.pid, signal.SIGTERM)
        self._signal_group(w.pid, signal.SIGCONT)
        for pgid in list(w.foreign_groups):
            self._end_group(pgid, w.kill_deadline)
        return True

    def _poll(self):
        now = time.monotonic()
        for w in list(self.workers.values()):
            if w.proc is None:
                continue
            if w.proc.returncode is None:
                rc = w.proc.poll()
                if rc is not None:
                    w.exit_seen = now
                elif w.kill_deadline is not None and now >= w.kill_deadline and w.hard_killed is None:
                    self._signal_group(w.pid, signal.SIGKILL)
                    w.hard_killed = now
                elif w.hard_killed is not None and now - w.hard_killed > UNKILLABLE_S and w.unkillable is None:
                    # Name every member still there (a stuck child too), not just the worker.
                    self._report_unkillable(w, [p.pid for p in procs.group_members(w.pid)] or [w.pid])
            if w.exit_seen is not None and (not w.chan_open or now - w.exit_seen >= DRAIN_S):
                # (a child that inherited the channel's socket keeps it open: hence the deadline)
                w.exit_seen = None
                self._on_exit(w, w.proc.returncode)
            if w.state == "starting" and not w.connected and now - w.started > NO_HELLO_S and w.alive:
                with self.lock:
                    w.state = "running"
        self._adopt_foreign_groups()
        self._reap_groups(now)
        self._pending_restarts()

    def _report_unkillable(self, w: Worker, pids):
        import psutil

        who = []
        for pid in pids:
            try:
                p = psutil.Process(pid)
                who.append({"pid": pid, "status": p.status(), "name": p.name()})
            except psutil.Error:
                continue
        w.unkillable = who
        if who:
            desc = ", ".join(f"pid {x['pid']} ({x['name']}, state {x['status']})" for x in who)
            self.alert("unkillable", f"rank {w.rank}: could not kill {desc}; it is left behind",
                       rank=w.rank, processes=who)

    def _on_exit(self, w: Worker, rc: int):
        self._write_report(w, time.monotonic())  # the curve's last point comes before the exit
        code, sig = stall.exit_cause(rc)
        paths = self.store.rank_paths(w.rank)
        tail = runstore.tail_lines(paths["stderr"], 10)
        reason = w.kill_reason
        kill_deadline = w.kill_deadline
        if reason is not None:
            state = "killed"
            cause = f"{reason} by mpwatch" + (f" ({sig})" if sig else f" (exit {code})")
        elif code == 0:
            state, cause = "exited", "exit 0"
        else:
            state = "failed"
            err = stall.last_error_line(tail)
            cause = (f"signal {sig}" if sig else f"exit {code}") + (f": {err}" if err else "")
        with self.lock:
            w.state, w.exit_code, w.signal, w.cause = state, code, sig, cause
            w.kill_deadline = None
            w.stall_info = None
        self.event("worker_exited", w.rank, pid=w.pid, exit_code=code, signal=sig, state=state,
                   cause=cause, reason=reason, stderr_tail=tail)
        if self.gpu is not None and state == "failed":
            self.gpu.on_worker_exit(w.rank, tail, w.cuda)  # "CUDA out of memory" -> an OOM alert
        g = self._groups.get(w.pid)
        if g is not None:
            g["active"] = True
            if g["deadline"] is None:
                # Leftover children (a DataLoader worker, a daemon) must not outlive the worker.
                self._signal_group(w.pid, signal.SIGTERM)
                self._signal_group(w.pid, signal.SIGCONT)
                # They got SIGTERM with the worker when mpwatch killed it, so they keep what is
                # left of its grace period; after a natural exit they get a short one.
                now = time.monotonic()
                g["deadline"] = now + min(self.opts.grace, 2.0) if reason is None else (kill_deadline or now)
        for pgid in list(w.foreign_groups):
            self._end_group(pgid, (kill_deadline or time.monotonic()) if reason else
                            time.monotonic() + min(self.opts.grace, 2.0))
        if reason == "restart":
            w.pending_restart = "restart"
        elif reason is None and state == "failed" and self.state == "running":
            if w.auto_restarts < self.opts.max_restarts:
                w.pending_restart = "auto"
                with self.lock:
                    w.state = "restarting"

    def _reap_groups(self, now: float):
        for pgid, g in list(self._groups.items()):
            if not g["active"]:
                continue
            if not self._group_alive(pgid):
                del self._groups[pgid]
                self._group_rank.pop(pgid, None)
                for w in self.workers.values():
                    w.foreign_groups.discard(pgid)
                self._tell_watchdog(f"-{pgid}")
                continue
            if g["killed"] is None and g["deadline"] is not None and now >= g["deadline"]:
                self._signal_group(pgid, signal.SIGKILL)
                g["killed"] = now
            elif g["killed"] is not None and now - g["killed"] > UNKILLABLE_S and not g["reported"]:
                g["reported"] = True
                rank = self._group_rank.get(pgid)
                w = next((x for x in self.workers.values() if x.pid == pgid or x.rank == rank), None)
                members = [p.pid for p in procs.group_members(pgid)]
                if w is not None:
                    self._report_unkillable(w, members)

    def _group_pending(self, pid) -> bool:
        g = self._groups.get(pid)
        return g is not None and not g["reported"]

    def _pending_restarts(self):
        for w in list(self.workers.values()):
            if w.pending_restart and not w.alive and not self._group_pending(w.pid):
                kind = w.pending_restart
                why = "on request" if kind == "restart" else f"exited with failure: {w.cause}"
                w.restarts += 1
                if kind == "auto":
                    w.auto_restarts += 1
                self.restarts_total += 1
                self._start(w.rank, reason="restarted")
                self.event("restarted", w.rank, attempt=w.restarts, pid=w.pid, why=why)

    # ------------------------------------------------------------ the loop ----
    def serve(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal never ends the run
        next_flush = 0.0
        while self.state != "finished":
            try:
                fn, args, box = self._commands.get(timeout=TICK_S)
                try:
                    box["reply"] = fn(*args)
                except ValueError as exc:
                    box["reply"] = {"ok": False, "error": str(exc)}
                except Exception as exc:  # noqa: BLE001 - report, never die
                    box["reply"] = {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
                box["done"].set()
            except queue.Empty:
                pass
            self._handle_signals()
            self._flush_reports(time.monotonic())
            self._poll()
            self._check_stalls()
            self._advance_resize()
            self._check_finished()
            now = time.monotonic()
            if now >= next_flush:
                self.store.flush()
                next_flush = now + 0.5
                if self.store.disk_error and not any(a["kind"] == "disk" for a in self.alerts):
                    self.alert("disk", self.store.disk_error + "; the run goes on")
                if self.status_out is not None:
                    self.status_out.tick(self)
        return self.exit_code if self.exit_code is not None else 1

    def _on_signal(self, signum, frame):
        self._signals.append(signum)  # handled by the loop: never lock inside a handler

    def _handle_signals(self):
        while self._signals:
            signum = self._signals.pop(0)
            if self.state == "stopping":
                # A second Ctrl-C: do not wait for the grace period.
                for w in self.workers.values():
                    if w.alive:
                        self._signal_group(w.pid, signal.SIGKILL)
                        w.hard_killed = time.monotonic()
            else:
                self._stop(f"signal {signal.Signals(signum).name}")

    def submit(self, fn, *args, timeout: float = 30.0) -> dict:
        """Run fn on the main thread (from a control thread) and wait for its reply."""
        box = {"done": threading.Event(), "reply": None}
        self._commands.put((fn, args, box))
        if not box["done"].wait(timeout):
            return {"ok": False, "error": "the supervisor did not answer in time"}
        return box["reply"]

    def _check_finished(self):
        if self.state == "finished":
            return
        # A worker we gave up on (unkillable, already reported) must not hold the run open forever.
        if any((w.alive and w.unkillable is None) or w.pending_restart for w in self.workers.values()):
            return
        if self.state == "resizing" or self.resize_to is not None:
            return
        if any(not g["reported"] for g in self._groups.values() if g["active"]):
            return
        self._finish()

    def _finish(self):
        ok = all(w.state == "exited" and w.exit_code == 0 for w in self.workers.values())
        self.exit_code = 0 if ok and self.workers else 1
        with self.lock:
            self.state = "finished"
        summary = {str(w.rank): {"state": w.state, "exit_code": w.exit_code, "signal": w.signal,
                                 "cause": w.cause} for w in self.workers.values()}
        self.event("run_finished", exit_code=self.exit_code, workers=summary)
        self.store.write_json(runstore.FINAL_JSON, self.snapshot())
        info = runstore.read_json(self.run_dir, runstore.RUN_JSON) or {}
        info.update(finished=time.time(), exit_code=self.exit_code)
        self.store.write_json(runstore.RUN_JSON, info)
        self.close()

    def close(self):
        self._stop_sampler.set()
        for part in ("hub", "control"):
            obj = getattr(self, part, None)
            if obj is not None:
                obj.close()
        if self.gpu is not None:
            self.gpu.close()
        if self.run_id is not None:
            registry.unregister(self.run_id)
        if getattr(self, "watchdog", None) is not None:
            # Groups still listed are ones we could not kill: let the watchdog try too.
            try:
                self.watchdog.stdin.close()
            except OSError:
                pass
            try:
                self.watchdog.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.store is not None:
            self.store.flush()
            self.store.close()

    close_partial = close  # after a failed setup(): release whatever was created

    # ------------------------------------------------------------- stalls ----
    def _check_stalls(self):
        now = time.monotonic()
        timeout = self.opts.stall_timeout
        any_stalled = False
        for w in list(self.workers.values()):
            if w.exit_seen is not None:  # ended: its exit is being recorded, it is not hung
                continue
            if w.state == "stalled" and w.alive:
                any_stalled = True
                if now - w.stall_probed >= STALL_PROBE_S:
                    self._diagnose(w, now)  # busy can turn blocked and back: keep it current
                continue
            if w.state not in ("running", "starting") or not w.alive:
                continue
            if w.stall_info is not None:  # resumed after a pause while stalled: that stall is over
                with self.lock:
                    w.stall_info = None
            if stall.is_stalled(now, timeout=timeout, started=w.started, connected=w.connected,
                                last_report=w.last_report, resumed=w.resumed):
                silent = now - max(t for t in (w.started, w.last_report, w.resumed) if t is not None)
                with self.lock:
                    w.state = "stalled"
                    w.stall_info = {"since": time.time() - silent, "step": w.step}
                d = self._diagnose(w, now)
                self.event("stalled", w.rank, silent_for=round(silent, 1), step=w.step, pid=w.pid,
                           kind=d["kind"], detail=d["detail"], wchan=d.get("wchan"))
                self.on_stalled(w)
                any_stalled = True
        if any_stalled:
            self._check_culprit()
        else:
            self._hang_text = None

    def _diagnose(self, w: Worker, now: float) -> dict:
        """Classify a stalled worker from /proc (one read: this runs on the main loop)."""
        cpu = (w.proc_info or {}).get("cpu_percent")
        gpu = bool(w.cuda) or bool((w.stall_info or {}).get("gpu"))
        d = hang.probe(w.pid, cpu_percent=cpu, cuda=gpu, reads=1)
        w.stall_probed = now
        with self.lock:
            if w.state == "stalled" and w.stall_info is not None:
                w.stall_info.update(kind=d["kind"], detail=d["detail"], wchan=d.get("wchan"),
                                    gpu=bool(d.get("gpu")))
        return d

    _hang_text: str | None = None

    def _check_culprit(self):
        """While ranks are stalled, name the rank the others wait for, once per finding."""
        with self.lock:
            views = [{"rank": w.rank, "step": w.step, "state": w.state, "stall": dict(w.stall_info or {})}
                     for w in self.workers.values()]
        s = straggler.analyze(views)
        if not s or not s["culprits"] or s["text"] == self._hang_text:
            return
        self._hang_text = s["text"]
        self.alert("hang", f"likely culprit: {s['text']}", culprits=s["culprits"], waiting=s["waiting"])

    def on_stalled(self, w: Worker):
        """Once per stall: dump every thread of the worker and of its children."""
        self._dump_async([w], reason="stall")

    # --------------------------------------------------------- channel hub ----
    # Called on hub threads.
    def on_refused(self, why: str):
        with self.lock:
            self.refused += 1

    def on_hello(self, peer, msg):
        with self.lock:
            w = self.workers.get(peer.rank)
            if w is None:
                return
            if peer.pid == w.pid:
                w.connected = True
                w.chan_open = True
                if w.state == "starting":
                    w.state = "running"
            else:
                w.child_reports.setdefault(peer.pid, {"pid": peer.pid, "step": None, "loss": None,
                                                      "last_report": None, "ppid": msg.get("ppid")})

    def on_close(self, peer):
        with self.lock:
            w = self.workers.get(peer.rank)
            if w is not None and peer.pid == w.pid:
                w.chan_open = False

    def on_bad(self, peer, why: str):
        with self.lock:
            w = self.workers.get(peer.rank) if peer is not None else None
            if w is not None:
                w.bad_frames += 1
        if w is not None and w.bad_frames in (1, 10, 100, 1000):
            self.event("bad_frame", w.rank, pid=peer.pid, why=why, count=w.bad_frames)

    def on_frame(self, peer, msg):
        t = msg.get("t")
        if t == protocol.BYE:
            return
        if t != protocol.BATCH:
            raise protocol.BadFrame(f"unknown message type {t!r}")
        reports = protocol.validate_batch(msg)
        dropped = msg.get("dropped", 0)
        phases = msg.get("phases")
        cuda = msg.get("cuda")
        if not isinstance(dropped, int) or (phases is not None and not isinstance(phases, dict)):
            raise protocol.BadFrame("batch fields of the wrong type")
        now = time.monotonic()
        recovered = child_of = None
        write = False
        last = reports[-1] if reports else None
        n = sum(r[4] for r in reports)
        with self.lock:
            w = self.workers.get(peer.rank)
            if w is None:
                return
            if peer.pid != w.pid:
                # A process the worker started (mp.Process, DataLoader): its own row, and never
                # the worker's heartbeat, so a busy child cannot hide a stuck worker.
                child_of = w.pid
                c = w.child_reports.setdefault(peer.pid, {"pid": peer.pid})
                if last is not None:
                    c.update(step=last[1], loss=last[2], last_report=now)
            else:
                recovered = self._apply_reports(w, reports, dropped, phases, cuda, now)
                if last is not None:
                    # events.jsonl gets at most one report per REPORT_EVENT_S per rank: the
                    # latest step and loss, every metric reported since the last one, and n,
                    # how many report() calls it stands for.
                    prev = w.report_pending
                    metrics = _merged_metrics(reports, prev["metrics"] if prev else None)
                    w.report_pending = {"ts": last[0], "step": w.step, "loss": w.loss, "metrics": metrics,
                                        "n": n + (prev["n"] if prev else 0),
                                        "dropped": dropped + (prev["dropped"] if prev else 0)}
                    write = now >= w.report_next
        if last is not None and child_of is not None:
            self.event("report", peer.rank, ts=last[0], step=last[1], loss=last[2],
                       metrics=_merged_metrics(reports, None), n=n, dropped=dropped,
                       pid=peer.pid, child_of=child_of)
        if write:
            self._write_report(w, now)
        if recovered is not None:
            self.event("recovered", peer.rank, step=w.step)

    def _write_report(self, w: Worker, now: float):
        with self.lock:
            rec, w.report_pending = w.report_pending, None
            w.report_next = now + REPORT_EVENT_S
        if rec is not None:
            self.event("report", w.rank, **rec)

    def _flush_reports(self, now: float):
        """Main loop: write reports held back by the rate limit once their slot comes."""
        for w in list(self.workers.values()):
            if w.report_pending is not None and now >= w.report_next:
                self._write_report(w, now)

    def _apply_reports(self, w: Worker, reports, dropped, phases, cuda, now):
        """Fold a worker's batch into its row (under the lock); returns the stall it ends."""
        recovered = None
        for ts, step, loss, metrics, n in reports:
            if step is not None:
                w.step = step
            if loss is not None:
                w.loss = loss
                w.tail.append(loss)
                w.add_history(step if step is not None else w.reports, loss)
            if metrics:
                w.metrics.update(metrics)
            w.reports += n
        w.dropped += max(0, dropped)
        if phases:
            w.phases = {str(k): f for k, v in phases.items() if (f := protocol.as_float(v)) is not None}
        if isinstance(cuda, dict):
            w.cuda = cuda
        if reports:
            w.last_report = now
            if w.step is not None:
                w.rate.append((now, w.step))
            if w.state == "stalled":
                w.state = "running"
                recovered = w.stall_info or {}
                w.stall_info = None
            elif w.state == "starting":
                w.state = "running"
        w.connected = True
        return recovered

    # ------------------------------------------------------------- sampler ----
    def _sampler(self):
        # psutil costs ~0.2 ms a process here: a wide run is sampled every 2 s (as nvitop does)
        while not self._stop_sampler.wait(SAMPLE_S * (2 if len(self.workers) > SAMPLE_WIDE else 1)):
            with self.lock:
                pids = [w.pid for w in self.workers.values() if w.alive]
            try:
                infos = self._probe.sample(pids)
            except Exception:  # noqa: BLE001 - a probe must never stop the run
                continue
            found = []
            with self.lock:
                for w in self.workers.values():
                    if w.pid in infos and w.alive:
                        w.proc_info = infos[w.pid]
                        found += [(w, c["pgid"]) for c in infos[w.pid]["children"]
                                  if c.get("pgid") not in (None, w.pid) and c["pgid"] not in w.foreign_groups]
            for w, pgid in found:
                # The watchdog hears of it first, before anyone sees it tracked: a supervisor
                # SIGKILLed right then must still take this group along. (The main loop does
                # the rest of the bookkeeping on its next tick.)
                self._tell_watchdog(f"+{pgid}")
                with self.lock:
                    w.foreign_groups.add(pgid)

    # ------------------------------------------------------------ commands ----
    def dispatch(self, req: dict) -> dict:
        """Control-socket entry point (control threads)."""
        cmd = req["cmd"]
        if cmd == "status":
            tail = req.get("tail", TAIL)  # a client drawing narrow sparklines asks for fewer points
            if type(tail) is not int or not 0 <= tail <= TAIL:
                raise ValueError(f"'tail' must be an integer from 0 to {TAIL}")
            return {"ok": True, "status": self.snapshot(tail)}
        if cmd == "events":
            since = req.get("since", 0)
            if not isinstance(since, int):
                raise ValueError("'since' must be an integer")
            with self.lock:
                return {"ok": True, "events": [e for e in self.recent if e["seq"] > since], "seq": self.seq}
        if cmd == "history":
            w = self._worker_arg(req.get("rank"))
            with self.lock:
                return {"ok": True, "rank": w.rank, "history": list(w.history)}
        if cmd == "logs":
            w = self._worker_arg(req.get("rank"))
            stream = req.get("stream", "stderr")
            if stream not in ("stdout", "stderr"):
                raise ValueError("stream must be stdout or stderr")
            n = req.get("lines", 50)
            if not isinstance(n, int) or n < 1:
                raise ValueError("lines must be a positive integer")
            path = self.store.rank_paths(w.rank)[stream]
            return {"ok": True, "rank": w.rank, "stream": stream, "path": str(path),
                    "lines": runstore.tail_lines(path, min(n, 2000))}
        if cmd in ("pause", "resume", "kill", "restart", "dump"):
            target = req.get("target")
            return self.submit(self._cmd_ranks, cmd, target)
        if cmd == "resize":
            n = req.get("n")
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError("resize needs a number of workers of at least 1")
            return self.submit(self._cmd_resize, n)
        if cmd == "stop":
            return self.submit(self._cmd_stop)
        if cmd == "gpu_timeline":  # {"window": SECONDS} -> {"ticks": [GpuTick], "marks": [GpuMark]}
            return {"ok": True, **(self.gpu.timeline(req.get("window", 120)) if self.gpu is not None
                                   else {"ticks": [], "marks": []})}
        raise ValueError(f"unknown command {cmd!r}")

    def _worker_arg(self, rank) -> Worker:
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise ValueError("rank must be an integer")
        with self.lock:
            w = self.workers.get(rank)
        if w is None:
            raise ValueError(f"no rank {rank} in this run (ranks: {self._ranks_text()})")
        return w

    def _ranks_text(self):
        ranks = sorted(self.workers)
        return f"0-{ranks[-1]}" if ranks == list(range(len(ranks))) and ranks else ",".join(map(str, ranks))

    def _targets(self, target) -> list[Worker]:
        if target == "all":
            return [self.workers[r] for r in sorted(self.workers)]
        if isinstance(target, str) and target.isdigit():
            target = int(target)
        return [self._worker_arg(target)]

    def _cmd_ranks(self, cmd: str, target) -> dict:
        if self.state in ("stopping", "finished"):
            raise ValueError(f"the run is {self.state}")
        ws = self._targets(target)
        done, skipped = [], []
        for w in ws:
            msg = getattr(self, f"_do_{cmd}")(w)
            (done if msg.startswith("ok:") else skipped).append(msg[3:].strip() if msg.startswith("ok:") else msg)
        if not done:
            raise ValueError("; ".join(skipped))
        text = "; ".join(done) + ("" if not skipped else " (" + "; ".join(skipped) + ")")
        if cmd == "restart" and len(ws) == 1 and self.opts.resize_mode == "restart" and len(self.workers) > 1:
            # Restart mode assumes the ranks share collectives: a rank restarted alone cannot
            # rejoin its peers' process group, so say how to restart them together.
            text += "; note: its peers may not take it back into their collectives (use 'restart all')"
        return {"ok": True, "message": text}

    def _do_pause(self, w: Worker) -> str:
        if not w.alive:
            return f"rank {w.rank} is not running ({w.state})"
        if w.state == "paused":
            return f"rank {w.rank} is already paused"
        self._signal_group(w.pid, signal.SIGSTOP)
        with self.lock:
            w.state = "paused"
        self.event("paused", w.rank, pid=w.pid)
        return f"ok: paused rank {w.rank} (pid {w.pid})"

    def _do_resume(self, w: Worker) -> str:
        if not w.alive:
            return f"rank {w.rank} is not running ({w.state})"
        if w.state != "paused":
            return f"rank {w.rank} is not paused"
        self._signal_group(w.pid, signal.SIGCONT)
        with self.lock:
            w.state = "running"
            w.resumed = time.monotonic()
        self.event("resumed", w.rank, pid=w.pid)
        return f"ok: resumed rank {w.rank} (pid {w.pid})"

    def _do_kill(self, w: Worker) -> str:
        if not self._kill(w, "kill"):
            return f"rank {w.rank} is not running ({w.state})"
        return f"ok: killing rank {w.rank} (pid {w.pid}): SIGTERM sent, SIGKILL after {self.opts.grace:g}s"

    def _do_restart(self, w: Worker) -> str:
        if w.alive:
            self._kill(w, "restart")
            return f"ok: restarting rank {w.rank} (pid {w.pid}): stopping it first"
        w.pending_restart = "restart"
        return f"ok: restarting rank {w.rank}"

    def _do_dump(self, w: Worker) -> str:
        if not w.alive:
            return f"rank {w.rank} is not running ({w.state})"
        self._dump_async([w], reason="request")
        return f"ok: dumping rank {w.rank} (pid {w.pid}) to {self.store.rank_paths(w.rank)['stacks']}"

    def _dump_async(self, ws: list[Worker], reason: str):
        def run():
            for w in ws:
                self.dump_worker(w, reason)
        threading.Thread(target=run, name="mpwatch-dump", daemon=True).start()

    def dump_worker(self, w: Worker, reason: str):
        pid = w.pid
        if pid is None:
            return None
        pids = [pid] + procs.descendants(pid)
        paths = self.store.rank_paths(w.rank)
        # py-spy --native stops the process for a moment: by default only for a stall dump.
        pyspy_policy = os.environ.get("MPWATCH_PYSPY", "stall").lower()
        native = pyspy_policy == "always" or (pyspy_policy == "stall" and reason == "stall")
        fr = []
        if flight.enabled():  # unchecked without NCCL: see supervisor/flight.py
            why = flight.trigger(paths["dir"], w.rank)
            fr = [f"NCCL flight recorder: {why or f'asked for rank-{w.rank}/{flight.TRACE_PREFIX}{w.rank}'}"]
        path, notes = stacks.capture(pids, paths["stack_file"], paths["stacks"], label=f"({reason})")
        notes = notes + fr
        try:
            where = stacks.summarize(path.read_text(errors="replace"), pid)
        except OSError:
            where = {}
        rel = str(path.relative_to(self.run_dir))
        with self.lock:
            w.last_dump = str(path)
            if w.pid == pid and w.state == "stalled" and w.stall_info is not None:
                w.stall_info.update(where=where.get("where"), innermost=where.get("innermost"),
                                    collective=where.get("collective"), dump=rel)
        self.event("dump", w.rank, path=rel, pid=pid, pids=pids, reason=reason, notes=notes,
                   where=where.get("where"), innermost=where.get("innermost"),
                   collective=where.get("collective"), native=native)
        if native:  # announced first: py-spy takes seconds on a process with torch loaded
            stacks.add_native(path, pids)
        return path

    def _cmd_resize(self, n: int) -> dict:
        if self.state != "running":
            raise ValueError(f"cannot resize while the run is {self.state}")
        cur = len(self.workers)
        if n == cur:
            raise ValueError(f"the run already has {n} workers")
        if self.opts.resize_mode == "independent":
            if n > cur:
                self.world = n
                for rank in range(cur, n):
                    self._start(rank)
            else:
                self.resize_to = n
                for rank in range(n, cur):
                    self._kill(self.workers[rank], "resize")
                self.world = n
            self.event("resized", frm=cur, to=n, mode="independent")
            return {"ok": True, "message": f"resizing from {cur} to {n} workers (independent)"}
        self.resize_to = n
        with self.lock:
            self.state = "resizing"
        for w in self.workers.values():
            self._kill(w, "resize")
        return {"ok": True, "message": f"resizing from {cur} to {n} workers: stopping all, then starting {n}"}

    def _advance_resize(self):
        n = self.resize_to
        if n is None:
            return
        if self.opts.resize_mode == "independent":
            gone = [r for r in list(self.workers) if r >= n and not self.workers[r].alive
                    and not self._group_pending(self.workers[r].pid)]
            with self.lock:
                for r in gone:
                    del self.workers[r]
            if all(r < n for r in self.workers):
                self.resize_to = None
            return
        if any(w.alive or self._group_pending(w.pid) for w in self.workers.values()):
            return
        if self.state == "stopping":
            self.resize_to = None
            return
        cur = len(self.workers)
        with self.lock:
            for r in [r for r in self.workers if r >= n]:
                del self.workers[r]
        self.world = n
        self.master_port = spawn.free_port()  # the old rendezvous may linger in TIME_WAIT
        for rank in range(n):
            self._start(rank, reason="resized" if rank in self.workers else None)
        with self.lock:
            self.state = "running"
            self.resize_to = None
        self.event("resized", frm=cur, to=n, mode="restart", master_port=self.master_port)

    def _cmd_stop(self) -> dict:
        if self.state in ("stopping", "finished"):
            return {"ok": True, "message": f"the run is already {self.state}"}
        alive = self._stop("requested")
        return {"ok": True, "message": f"stopping the run: SIGTERM sent to {alive} worker(s), "
                                       f"SIGKILL after {self.opts.grace:g}s"}

    def _stop(self, why: str) -> int:
        with self.lock:
            self.state = "stopping"
        for w in self.workers.values():
            w.pending_restart = None
        self.event("stopping", why=why)
        return sum(1 for w in self.workers.values() if self._kill(w, "stop"))

    # ------------------------------------------------------------ snapshot ----
    def snapshot(self, tail: int = TAIL) -> dict:
        now = time.monotonic()
        with self.lock:
            counts: dict = {}
            workers = []
            for rank in sorted(self.workers):
                w = self.workers[rank]
                counts[w.state] = counts.get(w.state, 0) + 1
                workers.append(self._worker_view(w, now, tail))
            gpus = self.gpu.snapshot() if self.gpu is not None else {"gpus": [], "gpu_status": None}
            return {
                "run": {
                    "id": self.run_id, "dir": str(self.run_dir), "script": self.opts.script,
                    "args": self.opts.args, "state": self.state, "pid": os.getpid(),
                    "started": self.started_wall, "uptime": round(now - self.started, 1),
                    "world_size": self.world, "nprocs": len(self.workers),
                    "counts": counts, "restarts": self.restarts_total, "exit_code": self.exit_code,
                    "options": {"max_restarts": self.opts.max_restarts, "stall_timeout": self.opts.stall_timeout,
                                "grace": self.opts.grace, "resize_mode": self.opts.resize_mode},
                    "refused_connections": self.refused + self.control.refused,
                },
                "workers": workers,
                "gpus": gpus.get("gpus", []),
                "gpu_status": gpus.get("gpu_status"),
                "alerts": list(self.alerts),
                "events_seq": self.seq,
                "straggler": straggler.analyze(workers),  # lags, and the likely culprit of a hang
            }

    def _worker_view(self, w: Worker, now: float, tail: int = TAIL) -> dict:
        info = w.proc_info if w.alive else {}
        children = []
        for c in info.get("children", []):
            rep = w.child_reports.get(c["pid"], {})
            children.append({**c, "reporting": "last_report" in rep and rep.get("last_report") is not None,
                             "step": rep.get("step"), "loss": rep.get("loss"),
                             "heartbeat_age": None if rep.get("last_report") is None
                             else round(now - rep["last_report"], 2)})
        return {
            "rank": w.rank, "pid": w.pid, "state": w.state, "step": w.step, "loss": w.loss,
            # A paused, stalled or ended worker makes no progress, whatever its last window says.
            "steps_per_s": stall.steps_per_second(list(w.rate)) if w.state in ("running", "starting")
            else (0.0 if w.alive else None),
            "metrics": dict(w.metrics),
            "heartbeat_age": None if w.last_report is None else round(now - w.last_report, 2),
            "heartbeat": "ok" if w.last_report is not None else ("waiting" if w.connected else "none"),
            "cpu_percent": info.get("cpu_percent"), "rss_bytes": info.get("rss_bytes"),
            "proc_status": info.get("status"),
            "restarts": w.restarts, "exit_code": w.exit_code, "signal": w.signal, "cause": w.cause,
            "reports": w.reports, "dropped": w.dropped, "bad_frames": w.bad_frames,
            "phases": dict(w.phases), "cuda": w.cuda, "loss_tail": list(w.tail)[len(w.tail) - tail:] if tail else [],
            "world_size": w.world, "uptime": round(now - w.started, 1) if w.started else None,
            "stall": dict(w.stall_info) if w.stall_info else None,  # a copy: dump threads update it
            "last_dump": w.last_dump, "unkillable": w.unkillable,
            "foreign_groups": sorted(w.foreign_groups),
            "children": children,
            "gpu": self.gpu.worker_gpu(w.rank) if self.gpu is not None and w.alive else None,
        }


def _merged_metrics(reports, into: dict | None) -> dict:
    """Every metric of a batch, later values winning; `into` (a pending event's) first."""
    out = dict(into) if into else {}
    for r in reports:
        if r[3]:
            out.update(r[3])
    return out
