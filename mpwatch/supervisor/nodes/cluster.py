"""Several nodes: this supervisor's side of a multi-node run (one supervisor per node, as
torchrun runs one agent per node). torch's rendezvous (supervisor.nodes.rendezvous) says who the nodes
are and gives each round a store; through it the supervisors find each other's records,
beat, and pass a stop on. What it decides:

- rounds: the first when the run starts; with c10d and --max-restarts K, a worker that
  fails makes this node stop its workers and join a new round, and a node that sees
  another waiting for one (torch's num_nodes_waiting) does the same, as torchrun's agent
  does. Ranks may change between rounds. With static a round never ends: restarts stay
  on their node (supervisor.core's per-worker restarts);
- stop: asked here (ctl, the TUI, a signal) it is written to the store; asked elsewhere it
  is read from it and the run here stops too;
- lost: a node whose beat stands still (MPWATCH_NODE_LOST_S), or whose store is gone, is lost: an
  alert and a node_lost event. Its workers' peers fail their collectives, and the run ends
  as torchrun's would;
- the end: a node whose workers have ended waits (up to EXIT_BARRIER_S, torchrun's exit
  barrier) for the others, so that a store it hosts outlives their workers.

A round's ranks are started over the ticks by the run's launch queue (supervisor.resize, as a
single-node launch is), so that a stop cancels a launch in progress within a tick.

Threads: the node thread (supervisor.nodes.link) does every blocking call on torch's handler and
store; the main thread calls `tick()` every loop and alone starts and kills workers,
acting on what the node thread found. They share a node_link.Board; the control threads
read `info()`.
"""
from __future__ import annotations

import os
import threading
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mpwatch.contract import Event, NodeInfo, NodePeer, RunState, State
from mpwatch.rundir import layout, writer
from mpwatch.settings import Settings
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.nodes import rendezvous
from mpwatch.supervisor.nodes.link import Board, NodeLink
from mpwatch.supervisor.options import NodesOptions, Options
from mpwatch.supervisor.resize import Start
from mpwatch.supervisor.spawn import Placement
from mpwatch.supervisor.workers.groups import ProcessGroups
from mpwatch.supervisor.workers.worker import Worker

if TYPE_CHECKING:
    from mpwatch.supervisor.resize import Resize

EXIT_BARRIER_S = 300.0  # torchrun's exit barrier
STOP_S = 10.0  # after a stop, the barrier lasts the grace period and this


class Phase(str, Enum):
    JOINING = "joining"  # in torch's rendezvous (the node thread); no workers
    RUNNING = "running"
    NEW_ROUND = "new_round"  # stopping this node's workers to join the next round
    FINISHING = "finishing"  # its workers have ended; waiting for the other nodes


class NodeRun(Protocol):
    """What this room asks of the run (supervisor.core's Run)."""

    lock: threading.RLock
    workers: dict[int, Worker]
    opts: Options
    settings: Settings
    run_id: str
    run_dir: Path
    log: EventLog
    store: writer.RunStore

    @property
    def state(self) -> RunState: ...

    def kill(self, w: Worker, reason: str) -> bool: ...

    def stop(self, why: str) -> int: ...

    def restart(self, w: Worker, why: str) -> None: ...

    @property
    def groups(self) -> ProcessGroups: ...


class Nodes:
    def __init__(self, opts: NodesOptions, run: NodeRun, launch: Resize):
        self.opts = opts
        self.run = run
        self._launch = launch  # the run's launch queue: starts local ranks over the ticks (main thread)
        self.phase = Phase.JOINING  # main thread's
        self.round: rendezvous.Round | None = None  # the round the workers run in
        self.failures = 0  # new rounds this node asked for after a failure (TORCHELASTIC_RESTART_COUNT)
        self._why = "first start"  # why the next round
        self._barrier_started = 0.0
        self._barrier_until: float | None = None
        self._said: set[str] = set()  # one-time notices already given
        self.board = Board()
        self._link = NodeLink(opts, self.board, self.me(), run.settings.node_lost_s)

    # ------------------------------------------------------- the main thread ----
    def start(self) -> None:
        self.board.want_join.set()
        self._link.start()

    def tick(self) -> None:
        """Act on what the node thread found: a round joined, an error, a stop, a lost node."""
        b = self.board
        self._watch_beat()
        with b.lock:
            joined, b.joined = b.joined, None
            lost, b.lost_new = b.lost_new, []
            error, peer_stop, waiting = b.error, b.peer_stop, b.waiting
        for peer in lost:
            self._lost(peer)
        running, groups = self.run.state is RunState.RUNNING, self.run.groups
        if error is not None and self._once("error"):
            self.run.log.alert("rendezvous", error)
            if running:
                self.run.stop(error)
        elif peer_stop is not None and running and self._once("peer_stop"):
            self.run.stop(peer_stop)
        elif joined is not None and self.phase is Phase.JOINING and running:
            self._begin(joined)
        elif waiting and self.phase is Phase.RUNNING and running:
            self.new_round("another node started a new round")
        elif (self.phase is Phase.NEW_ROUND and running
              and not any(map(groups.lingers, self.run.workers.values()))):
            self.phase = Phase.JOINING
            with b.lock:
                b.waiting = False
            b.want_join.set()
            b.wake.set()

    def _watch_beat(self) -> None:
        """A beat held in torch's store call past the time that makes a node lost: the store's
        host answers no more (frozen, or cut off: its socket never closed). The node thread waits
        on it; this node does not: the host is lost now."""
        b, r = self.board, self.round
        with b.lock:
            since, gone = b.beat_since, b.store_gone
        if r is None or since is None or gone or time.monotonic() - since <= self._link.lost_s:
            return
        self._link.store_gone(r, TimeoutError(f"no answer in {self._link.lost_s:g}s"))

    def _once(self, what: str) -> bool:
        if what in self._said:
            return False
        self._said.add(what)
        return True

    def _begin(self, r: rendezvous.Round) -> None:
        """Start this node's workers in a round the node thread has joined."""
        first = self.round is None
        self.round, self.phase = r, Phase.RUNNING
        with self.board.lock:
            self.board.round, self.board.state = r, "up"
        self.run.log.event(Event.ROUND, round=r.number, node_rank=r.group_rank, nnodes=r.group_world,
                           base_rank=r.base_rank, nprocs=self.run.opts.nprocs, world_size=r.world,
                           why=self._why)
        self.run.store.update_json(layout.RUN_JSON, node=self.info())
        again = None if first else f"round {r.number}: {self._why}"  # a rank started before is restarted
        self._launch.queue(Start(rank, restart=again) for rank in range(self.run.opts.nprocs))

    def new_round(self, why: str) -> None:
        """c10d: stop this node's workers, then join the next round (main thread)."""
        self._why, self.phase = why, Phase.NEW_ROUND
        with self.board.lock:
            self.board.state = "round"
        self._launch.cancel()  # ranks of this round not started yet wait for the next one
        for w in list(self.run.workers.values()):
            w.pending_restart = None  # a restart asked of one rank: the round restarts them all
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
        with self.board.lock:
            if self.board.peer_stop is None:
                self.board.stop_why = f"stopped on node {self.node_rank} ({self.opts.host}): {why}"
        self.board.wake.set()

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
            with self.board.lock:
                self.board.state, self.board.finishing = "done", True
            self.board.wake.set()
        with self.board.lock:
            others = [s for r, s in self.board.peers.items() if r != self.round.group_rank]
            gone = self.board.error is not None or self.board.store_gone
        # A node between rounds waits for this one, which will not join again: torch's shutdown
        # at close() closes the rendezvous and ends its wait, as torchrun's agent does.
        waiting = [s for s in others if s not in ("done", "lost", "round")]
        # After a stop every node ends within its grace period: no need to wait for the full barrier.
        stopping = (self.run.state is RunState.STOPPING
                    and now >= self._barrier_started + self.run.opts.grace + STOP_S)
        return gone or not waiting or now >= self._barrier_until or stopping

    def close(self) -> None:
        """The run is over: the node thread says so and leaves the rendezvous (bounded wait)."""
        with self.board.lock:
            self.board.closing, self.board.state = True, "done"
            in_join = self.board.in_join  # blocked in torch's rendezvous: nothing to wait for
        self.board.wake.set()
        if not self._link.is_alive():
            return
        if not in_join:
            self._link.join(timeout=3.0)
        elif self.opts.backend == "c10d":  # the others in the same rendezvous hear it closed
            closer = threading.Thread(target=self._link.close_rendezvous, name="mpwatch-nodes-close",
                                      daemon=True)
            closer.start()
            closer.join(timeout=3.0)

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
        # TORCHELASTIC_RESTART_COUNT: c10d counts the rounds failures started, as torchrun's agent
        # does; static restarts a rank alone (it cannot reach the other nodes), as on one node.
        w = self.run.workers.get(rank)
        restarts = self.failures if self.opts.backend == "c10d" else (0 if w is None else w.restarts)
        return Placement(local_rank=rank, rank=r.base_rank + rank, world=r.world, local_world=o.nprocs,
                         master_addr=r.master_addr, master_port=r.master_port, run_id=self.opts.rdzv_id,
                         restarts=restarts, max_restarts=o.max_restarts, group_rank=r.group_rank,
                         group_world=r.group_world, role=o.role, agent_store=r.agent_store)

    def info(self) -> NodeInfo:
        r = self.round
        with self.board.lock:
            states = dict(self.board.peers)
            if r is not None:
                states[r.group_rank] = self.board.state
            in_join = self.board.in_join
        phase = self.phase.value
        if self.phase is Phase.JOINING and not in_join and r is None:
            phase = "starting"  # loading torch, making torch's handler (static: reaching node 0's store)
        peers = [] if r is None else [p.copy() for p in r.peers]
        for p in peers:
            p["state"] = states.get(p["node_rank"], "up")
        return NodeInfo(
            node_rank=self.node_rank, nnodes=self.opts.max_nodes if r is None else r.group_world,
            host=self.opts.host, job_id=self.opts.rdzv_id, rdzv_backend=self.opts.backend,
            round=-1 if r is None else r.number, base_rank=0 if r is None else r.base_rank,
            world_size=self.run.opts.nprocs if r is None else r.world, peers=peers, state=phase,
            slurm=self.opts.slurm)

    def me(self) -> NodePeer:
        return NodePeer(node_rank=self.opts.node_rank or 0, host=self.opts.host, run_id=self.run.run_id,
                        run_dir=str(self.run.run_dir.resolve()), pid=os.getpid(), nprocs=self.run.opts.nprocs)

    def _lost(self, peer: NodePeer) -> None:
        with self.board.lock:
            why = self.board.lost_why.get(peer["node_rank"], "")
        text = (f"node {peer['node_rank']} ({peer['host']}, supervisor pid {peer['pid']}) is lost: {why}; "
                "its workers are gone, and the workers here will fail their collectives")
        self.run.log.alert("node_lost", text)
        self.run.log.event(Event.NODE_LOST, node_rank=peer["node_rank"], host=peer["host"], why=why)
