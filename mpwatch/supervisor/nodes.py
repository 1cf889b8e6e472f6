"""Several nodes: this supervisor's side of a multi-node run (one supervisor per node, as
torchrun runs one agent per node). torch's rendezvous (rendezvous.py) says who the nodes
are and gives each round a store; through it the supervisors find each other's records,
beat, and pass a stop on. What it decides:

- rounds: the first when the run starts; with c10d and --max-restarts K, a worker that
  fails makes this node stop its workers and join a new round, and a node that sees
  another waiting for one (torch's num_nodes_waiting) does the same, as torchrun's agent
  does. Ranks may change between rounds. With static a round never ends: restarts stay
  on their node (supervisor/core.py's per-worker restarts);
- stop: asked here (ctl, the TUI, a signal) it is written to the store; asked elsewhere it
  is read from it and the run here stops too;
- lost: a node whose beat stands still for LOST_S (or whose store is gone) is lost: an
  alert and a node_lost event. Its workers' peers fail their collectives, and the run ends
  as torchrun's would;
- the end: a node whose workers have ended waits (up to EXIT_BARRIER_S, torchrun's exit
  barrier) for the others, so that a store it hosts outlives their workers.

Threads: the node thread does every blocking call on torch's handler and store (it loads
torch, joins rounds, beats every BEAT_S); the main thread calls `tick()` every loop and
alone starts and kills workers, acting on what the node thread found. `_lock` guards what
the two share; the control threads read `info()`.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Protocol

from mpwatch import runstore
from mpwatch.status import Event, NodeInfo, NodePeer, RunState, State
from mpwatch.supervisor import rendezvous as rdzv
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.options import NodesOptions, Options
from mpwatch.supervisor.spawn import Placement
from mpwatch.supervisor.workers import Worker

BEAT_S = 1.0
LOST_S = float(os.environ.get("MPWATCH_NODE_LOST_S", "10"))  # torch's c10d keep-alive gives up after 3 x 5 s
EXIT_BARRIER_S = 300.0  # torchrun's exit barrier
STOP_S = 10.0  # after a stop, the barrier lasts the grace period and this


class Phase(str, Enum):
    JOINING = "joining"  # in torch's rendezvous (the node thread); no workers
    RUNNING = "running"
    NEW_ROUND = "new_round"  # stopping this node's workers to join the next round
    FINISHING = "finishing"  # its workers have ended; waiting for the other nodes


class NodeRun(Protocol):
    """What this room asks of the run (supervisor/core.py's Run)."""

    lock: threading.RLock
    workers: dict[int, Worker]
    opts: Options
    run_id: str
    run_dir: Path
    log: EventLog
    store: runstore.RunStore
    restarts_total: int

    @property
    def state(self) -> RunState: ...

    def kill(self, w: Worker, reason: str) -> bool: ...

    def stop(self, why: str) -> int: ...

    def lingers(self, w: Worker) -> bool: ...


class Nodes:
    def __init__(self, opts: NodesOptions, run: NodeRun, start: Callable[[int, str | None], None]):
        self.opts = opts
        self.run = run
        self._start = start  # the run's way to start one local rank (main thread)
        self.phase = Phase.JOINING  # main thread's
        self.round: rdzv.Round | None = None  # the round the workers run in
        self.failures = 0  # new rounds this node asked for after a failure (TORCHELASTIC_RESTART_COUNT)
        self._why = "first start"  # why the next round
        self._barrier_started = 0.0
        self._barrier_until: float | None = None
        self._said: set[str] = set()  # one-time notices already given
        self._lock = threading.Lock()
        # found by the node thread, read by the main thread (under _lock)
        self._joined: rdzv.Round | None = None
        self._error: str | None = None
        self._peer_stop: str | None = None
        self._waiting = False  # c10d: a node waits for a new round
        self._peers: dict[int, str] = {}  # group rank -> up | round | done | lost
        self._lost_new: list[NodePeer] = []
        self._lost_why: dict[int, str] = {}
        self._store_gone = False  # the round's store failed (its host has ended, or is lost)
        # asked by the main thread, done by the node thread
        self._want_join = threading.Event()
        self._wake = threading.Event()
        self._stop_why: str | None = None  # to write to the store
        self._state = "up"  # what this node's beat says: up | round | done
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name="mpwatch-nodes", daemon=True)

    # ------------------------------------------------------- the main thread ----
    def start(self) -> None:
        self._want_join.set()
        self._thread.start()

    def tick(self) -> None:
        """Act on what the node thread found: a round joined, an error, a stop, a lost node."""
        with self._lock:
            joined, self._joined = self._joined, None
            lost, self._lost_new = self._lost_new, []
            error, peer_stop, waiting = self._error, self._peer_stop, self._waiting
        for peer in lost:
            self._lost(peer)
        running = self.run.state is RunState.RUNNING
        if error is not None and self._once("error"):
            self.run.log.alert("rendezvous", error)
            if running:
                self.run.stop(f"rendezvous: {error}")
        elif peer_stop is not None and running and self._once("peer_stop"):
            self.run.stop(peer_stop)
        elif joined is not None and self.phase is Phase.JOINING and running:
            self._begin(joined)
        elif waiting and self.phase is Phase.RUNNING and running:
            self.new_round("another node started a new round")
        elif self.phase is Phase.NEW_ROUND and running and not any(map(self.run.lingers, self.run.workers.values())):
            self.phase = Phase.JOINING
            with self._lock:
                self._waiting = False
            self._want_join.set()
            self._wake.set()

    def _once(self, what: str) -> bool:
        if what in self._said:
            return False
        self._said.add(what)
        return True

    def _begin(self, r: rdzv.Round) -> None:
        """Start this node's workers in a round the node thread has joined."""
        first = self.round is None
        self.round, self.phase = r, Phase.RUNNING
        with self._lock:
            self._state = "up"
        self.run.log.event(Event.ROUND, round=r.number, node_rank=r.group_rank, nnodes=r.group_world,
                           base_rank=r.base_rank, nprocs=self.run.opts.nprocs, world_size=r.world, why=self._why)
        self.run.store.update_json(runstore.RUN_JSON, node=self.info())
        for rank in range(self.run.opts.nprocs):
            w = self.run.workers.get(rank)
            if first or w is None:
                self._start(rank, None)
                continue
            w.restarts += 1
            self.run.restarts_total += 1
            self._start(rank, "restarted")
            self.run.log.event(Event.RESTARTED, rank, attempt=w.restarts, pid=w.pid,
                               why=f"round {r.number}: {self._why}")

    def new_round(self, why: str) -> None:
        """c10d: stop this node's workers, then join the next round (main thread)."""
        self._why, self.phase = why, Phase.NEW_ROUND
        with self._lock:
            self._state = "round"
        for w in list(self.run.workers.values()):
            self.run.kill(w, "new round")

    def on_failure(self, w: Worker) -> bool:
        """A worker failed by itself: True when this room takes it over (c10d: a new round of
        every node while restarts are left; none of its own either way), False to leave it
        to the per-worker restarts (static, where a restart cannot reach the other nodes)."""
        if self.opts.backend != "c10d":
            return False
        if self.phase is Phase.RUNNING and self.failures < self.run.opts.max_restarts:
            self.failures += 1
            with self.run.lock:
                w.transition(State.RESTARTING, "failed: a new round of every node")
            self.new_round(f"rank {w.rank} on node {self.node_rank} failed")
        return True

    def on_stop(self, why: str) -> None:
        """The run stops here: tell the other nodes, unless one of them asked for it."""
        with self._lock:
            if self._peer_stop is None:
                self._stop_why = f"stopped on node {self.node_rank} ({self.opts.host}): {why}"
        self._wake.set()

    def busy(self) -> bool:
        """Between rounds: the run is not over while its workers wait for one."""
        return self.phase in (Phase.JOINING, Phase.NEW_ROUND) and self.run.state is RunState.RUNNING

    def may_finish(self) -> bool:
        """Every local worker has ended: True once the others have too (or are lost), or the
        exit barrier has passed; until then this node says it is done and waits."""
        if self.round is None:
            return True
        now = time.monotonic()
        if self._barrier_until is None:
            self._barrier_started, self._barrier_until = now, now + EXIT_BARRIER_S
            self.phase = Phase.FINISHING
            with self._lock:
                self._state = "done"
            self._wake.set()
        with self._lock:
            others = [s for r, s in self._peers.items() if r != self.round.group_rank]
            gone = self._error is not None or self._store_gone
        waiting = [s for s in others if s not in ("done", "lost")]
        # After a stop every node ends within its grace period: no need to wait for the full barrier.
        stopping = self.run.state is RunState.STOPPING and now >= self._barrier_started + self.run.opts.grace + STOP_S
        return gone or not waiting or now >= self._barrier_until or stopping

    def close(self) -> None:
        """The run is over: the node thread says so and leaves the rendezvous (bounded wait)."""
        with self._lock:
            self._closing = True
            if self._state != "done":
                self._state = "done"
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3.0)

    # ---------------------------------------------------------------- readers ----
    @property
    def node_rank(self) -> int:
        return self.round.group_rank if self.round is not None else (self.opts.node_rank or 0)

    def global_rank(self, rank: int) -> int:
        return rank if self.round is None else self.round.base_rank + rank

    def placement(self, rank: int) -> Placement:
        r, o = self.round, self.run.opts
        if r is None:
            raise RuntimeError("no rendezvous round yet: workers start once one is joined")
        return Placement(local_rank=rank, rank=r.base_rank + rank, world=r.world, local_world=o.nprocs,
                         master_addr=r.master_addr, master_port=r.master_port, run_id=self.opts.rdzv_id,
                         restarts=self.failures, max_restarts=o.max_restarts, group_rank=r.group_rank,
                         group_world=r.group_world, role=o.role, agent_store=r.agent_store)

    def info(self) -> NodeInfo:
        r = self.round
        with self._lock:
            states = dict(self._peers)
            if r is not None:
                states[r.group_rank] = self._state
        peers = [] if r is None else [p.copy() for p in r.peers]
        for p in peers:
            p["state"] = states.get(p["node_rank"], "up")
        return NodeInfo(
            node_rank=self.node_rank, nnodes=self.opts.max_nodes if r is None else r.group_world,
            host=self.opts.host, job_id=self.opts.rdzv_id, rdzv_backend=self.opts.backend,
            round=-1 if r is None else r.number, base_rank=0 if r is None else r.base_rank,
            world_size=self.run.opts.nprocs if r is None else r.world, peers=peers, state=self.phase.value,
            slurm=self.opts.slurm)

    def me(self) -> NodePeer:
        return NodePeer(node_rank=self.opts.node_rank or 0, host=self.opts.host, run_id=self.run.run_id,
                        run_dir=str(self.run.run_dir.resolve()), pid=os.getpid(), nprocs=self.run.opts.nprocs)

    def _lost(self, peer: NodePeer) -> None:
        why = self._lost_why.get(peer["node_rank"], "")
        text = (f"node {peer['node_rank']} ({peer['host']}, supervisor pid {peer['pid']}) is lost: {why}; "
                "its workers are gone, and the workers here will fail their collectives")
        self.run.log.alert("node_lost", text)
        self.run.log.event(Event.NODE_LOST, node_rank=peer["node_rank"], host=peer["host"], why=why)

    # ---------------------------------------------------------- the node thread ----
    def _serve(self) -> None:
        try:
            handler = rdzv.make_handler(self.opts)
        except rdzv.RendezvousFailed as exc:
            with self._lock:
                self._error = str(exc)
            return
        watch = NodeWatch(self)
        while True:
            with self._lock:
                closing = self._closing
            if closing:
                watch.leave(handler)
                return
            if self._want_join.is_set():
                self._want_join.clear()
                self._join(handler)
                watch = NodeWatch(self)
            elif self.round is not None:
                watch.beat(handler)
            self._wake.wait(BEAT_S)
            self._wake.clear()

    def _join(self, handler: rdzv.Handler) -> None:
        number = 0 if self.round is None else self.round.number + 1
        try:
            r = rdzv.join(handler, self.me(), number)
        except rdzv.RendezvousClosed:
            error = "the rendezvous is closed: another node ended the run"
        except rdzv.RendezvousFailed as exc:
            error = str(exc)
        else:
            with self._lock:
                self._joined = r
                self._peers = {p["node_rank"]: "up" for p in r.peers}
            return
        with self._lock:
            self._error = error


class NodeWatch:
    """One round seen from the node thread: this node's beat, the others' beats, a stop."""

    def __init__(self, nodes: Nodes):
        self.nodes = nodes
        self.count = 0
        self.seen: dict[int, tuple[int, float]] = {}  # group rank -> (beat count, when it last moved)
        self.broken = False
        self.stop_sent = False

    def beat(self, handler: rdzv.Handler) -> None:
        n = self.nodes
        r = n.round
        if r is None or self.broken or n._joined is not None:
            return
        with n._lock:
            state, stop_why = n._state, n._stop_why
        self.count += 1
        try:
            rdzv.beat(r.store, r.group_rank, self.count, state)
            if stop_why is not None and not self.stop_sent:
                rdzv.ask_stop(r.store, stop_why)
                self.stop_sent = True
                if n.opts.backend == "c10d":
                    handler.set_closed()  # nodes waiting in a rendezvous hear it there
                return
            beats = rdzv.beats(r.store, r.group_world)
            peer_stop = rdzv.stop_asked(r.store)
            waiting = n.opts.backend == "c10d" and state == "up" and handler.num_nodes_waiting() > 0
        except Exception as exc:  # noqa: BLE001 - the store's host is gone (or unreachable)
            self._store_gone(r, exc)
            return
        self._judge(r, beats)
        with n._lock:
            if peer_stop is not None and n._stop_why is None:
                n._peer_stop = peer_stop
            n._waiting = n._waiting or waiting

    def _judge(self, r: rdzv.Round, beats: list[tuple[int, str]]) -> None:
        now, n = time.monotonic(), self.nodes
        with n._lock:
            for peer, (count, state) in zip(r.peers, beats, strict=True):
                rank = peer["node_rank"]
                if rank == r.group_rank or n._peers.get(rank) == "lost":
                    continue
                last = self.seen.get(rank)
                if last is None or count != last[0]:
                    self.seen[rank] = (count, now)
                n._peers[rank] = state or "up"
                if state == "up" and now - self.seen[rank][1] > LOST_S:
                    self._mark_lost(peer, f"its supervisor stopped beating {LOST_S:g}s ago")

    def _store_gone(self, r: rdzv.Round, exc: BaseException) -> None:
        """The round's store failed: the node that hosts it is gone. Which one that is: the
        one at the rendezvous endpoint's host (static: node 0)."""
        self.broken = True
        n = self.nodes
        with n._lock:
            n._store_gone = True
        host = n.opts.endpoint.rpartition(":")[0]
        hosts = [p for p in r.peers if p["node_rank"] != r.group_rank
                 and (p["host"] == host if n.opts.backend == "c10d" else p["node_rank"] == 0)]
        with n._lock:
            if n.phase is Phase.FINISHING or n._closing:
                return  # the others have ended and the host with them
            for peer in hosts or [p for p in r.peers if p["node_rank"] != r.group_rank]:
                if n._peers.get(peer["node_rank"]) not in ("done", "lost"):
                    self._mark_lost(peer, f"the rendezvous store at {n.opts.endpoint} is gone "
                                          f"({rdzv.failure(exc)})")

    def _mark_lost(self, peer: NodePeer, why: str) -> None:
        """Under the nodes' lock."""
        n = self.nodes
        n._peers[peer["node_rank"]] = "lost"
        n._lost_why[peer["node_rank"]] = why
        n._lost_new.append(peer)

    def leave(self, handler: rdzv.Handler) -> None:
        """The run is over here: a last beat (done), a stop not yet told, then torch's shutdown."""
        n = self.nodes
        r = n.round
        try:
            if r is not None and not self.broken:
                with n._lock:
                    stop_why = n._stop_why
                if stop_why is not None and not self.stop_sent:
                    rdzv.ask_stop(r.store, stop_why)
                rdzv.beat(r.store, r.group_rank, self.count + 1, "done")
            handler.shutdown()
        except Exception:  # noqa: BLE001 - leaving: a store that is gone has nothing to tell
            pass
