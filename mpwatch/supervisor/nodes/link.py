"""The node thread of a multi-node supervisor: every blocking call on torch's rendezvous
handler and on the round's store (supervisor.nodes.rendezvous) happens here, never on the main thread.
It loads torch, joins rounds when asked, then beats every BEAT_S and reads the other
nodes' beats, a stop asked elsewhere, and (c10d) whether a node waits for a new round.

It talks with the main thread (supervisor.nodes.cluster) through a `Board` only: the node
thread writes what it found, the main thread what it asks, both under `Board.lock`.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from mpwatch.contract import NodePeer
from mpwatch.supervisor import boundary, errors
from mpwatch.supervisor.nodes import rendezvous
from mpwatch.supervisor.options import NodesOptions

BEAT_S = 1.0
FINISH_BEAT_S = 0.2  # this node's workers have ended: it learns sooner that the others have too
# A node leaving says "done" this long before it goes (and its store, if it hosts it, with it): the
# others, reading every FINISH_BEAT_S, learn it ended before they find its store gone, which then is
# no news; a store gone while its host's last word was "up" is a lost host.
LINGER_S = 1.0


@dataclass(eq=False)
class Board:
    """What the node thread and the main thread share; every field under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    # the main thread's
    round: rendezvous.Round | None = None  # the round the workers run in
    finishing: bool = False  # this node's workers have ended: a store that goes now is no news
    state: str = "up"  # what this node's beat says: up | round (between rounds) | done
    stop_why: str | None = None  # a stop asked here, to write to the store
    closing: bool = False
    # the node thread's
    joined: rendezvous.Round | None = None  # a round joined, not yet taken by the main thread
    in_join: bool = False  # blocked in torch's rendezvous
    error: str | None = None
    peer_stop: str | None = None  # a stop asked on another node
    waiting: bool = False  # c10d: a node waits for a new round
    peers: dict[int, str] = field(default_factory=dict)  # group rank -> up | round | done | lost
    lost_new: list[NodePeer] = field(default_factory=list)  # lost, not yet told
    lost_why: dict[int, str] = field(default_factory=dict)
    store_gone: bool = False  # the round's store failed (its host has ended, or is lost)
    beat_since: float | None = None  # monotonic start of a beat under way (the main thread watches it)
    # wake-ups
    want_join: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)


class NodeLink(threading.Thread):
    def __init__(self, opts: NodesOptions, board: Board, me: NodePeer, lost_s: float):
        super().__init__(name="mpwatch-nodes", daemon=True)  # a rendezvous may block for minutes
        self.opts = opts
        # a beat standing still this long is a lost node (MPWATCH_NODE_LOST_S, default 10: torch's
        # c10d keep-alive gives up after 3 x 5 s)
        self.lost_s = lost_s
        self.board = board
        self.me = me  # this node's record (its node rank is the one the rendezvous gives)
        self.count = 0  # beats sent this round
        self.seen: dict[int, tuple[int, float]] = {}  # group rank -> (beat count, when it last moved)
        self.broken = False  # this round's store failed
        self.stop_sent = False
        self.handler: rendezvous.Handler | None = None

    def run(self) -> None:
        b = self.board
        try:
            handler = self.handler = rendezvous.make_handler(self.opts)
        except rendezvous.RendezvousFailed as exc:
            with b.lock:
                b.error = str(exc)
            return
        while True:
            with b.lock:
                closing, r, finishing = b.closing, b.round, b.finishing
            if closing:
                self.leave(handler, r)
                return
            with boundary.room("nodes"):  # a turn that fails costs that turn, never the node thread
                if b.want_join.is_set():
                    b.want_join.clear()
                    self.join_round(handler, r)
                elif r is not None:
                    self.beat(handler, r)
            b.wake.wait(FINISH_BEAT_S if finishing else BEAT_S)
            b.wake.clear()

    def join_round(self, handler: rendezvous.Handler, last: rendezvous.Round | None) -> None:
        b = self.board
        with b.lock:
            b.in_join = True
        try:
            r = rendezvous.join(handler, self.me, 0 if last is None else last.number + 1)
        except rendezvous.RendezvousClosed:
            error: str | None = "the rendezvous is closed: another node ended the run"
        except rendezvous.RendezvousFailed as exc:
            error = str(exc)
        else:
            error = None
            self.count, self.seen, self.broken = 0, {}, False
        with b.lock:
            b.in_join = False
            if error is not None:
                b.error = error
            else:
                b.joined, b.waiting, b.store_gone = r, False, False
                b.peers = {p["node_rank"]: "up" for p in r.peers}

    def beat(self, handler: rendezvous.Handler, r: rendezvous.Round) -> None:
        """This node's beat; the others', a stop from elsewhere, a node waiting (c10d)."""
        b = self.board
        with b.lock:
            state, stop_why, taken = b.state, b.stop_why, b.joined is None
        if self.broken or not taken:
            return
        self.count += 1
        with b.lock:
            b.beat_since = time.monotonic()
        try:
            self._beat(handler, r, state, stop_why)
        finally:
            with b.lock:
                b.beat_since = None

    def _beat(self, handler: rendezvous.Handler, r: rendezvous.Round, state: str,
              stop_why: str | None) -> None:
        b = self.board
        try:
            rendezvous.beat(r.store, r.group_rank, self.count, state)
            if stop_why is not None and not self.stop_sent:
                rendezvous.ask_stop(r.store, stop_why)
                self.stop_sent = True
                if self.opts.backend == "c10d":
                    handler.set_closed()  # nodes waiting in a rendezvous hear it there
                return
            beats = rendezvous.beats(r.store, r.group_world)
            peer_stop = rendezvous.stop_asked(r.store)
            waiting = self.opts.backend == "c10d" and state == "up" and handler.num_nodes_waiting() > 0
        except Exception as exc:  # noqa: BLE001 - the store's host is gone (or unreachable)
            errors.note("node link: the round's store", exc)
            self.store_gone(r, exc)
            return
        self.judge(r, beats)
        with b.lock:
            if peer_stop is not None and b.stop_why is None:
                b.peer_stop = peer_stop
            b.waiting = b.waiting or waiting

    def judge(self, r: rendezvous.Round, beats: list[tuple[int, str]]) -> None:
        """A node whose beat stood still for lost_s is lost (one between rounds, or done, is not)."""
        now, b = time.monotonic(), self.board
        with b.lock:
            for peer, (count, state) in zip(r.peers, beats, strict=True):
                rank = peer["node_rank"]
                if rank == r.group_rank or b.peers.get(rank) == "lost":
                    continue
                last = self.seen.get(rank)
                if last is None or count != last[0]:
                    self.seen[rank] = (count, now)
                b.peers[rank] = state or "up"
                if state == "up" and now - self.seen[rank][1] > self.lost_s:
                    self._mark_lost(peer, f"its supervisor stopped beating {self.lost_s:g}s ago")

    def store_gone(self, r: rendezvous.Round, exc: BaseException) -> None:
        """The round's store failed: the node that hosts it is gone. Which one that is: the
        one at the rendezvous endpoint's host (static: node 0); every other one if none is."""
        self.broken = True
        b = self.board
        host = self.opts.endpoint.rpartition(":")[0]
        others = [p for p in r.peers if p["node_rank"] != r.group_rank]
        hosts = [p for p in others
                 if (p["host"] == host if self.opts.backend == "c10d" else p["node_rank"] == 0)]
        with b.lock:
            b.store_gone = True
            if b.closing:
                return  # this node is leaving: nothing is news now
            # (while it waits for the others, a host whose last beat said done ended: no news either)
            for peer in hosts or others:
                if b.peers.get(peer["node_rank"]) not in ("done", "lost"):
                    self._mark_lost(peer, f"the rendezvous store at {self.opts.endpoint} is gone "
                                          f"({rendezvous.failure(exc)})")

    def _mark_lost(self, peer: NodePeer, why: str) -> None:
        """Under the board's lock."""
        b = self.board
        b.peers[peer["node_rank"]] = "lost"
        b.lost_why[peer["node_rank"]] = why
        b.lost_new.append(peer)

    def close_rendezvous(self) -> None:
        """The run ends while this thread waits in torch's rendezvous (another thread: the
        one call made on the handler from outside; c10d's state is a compare-and-set in the
        store, made for concurrent nodes): close it so that the other nodes stop waiting."""
        try:
            if self.handler is not None:
                self.handler.set_closed()
        except Exception as exc:  # noqa: BLE001 - ending: a store that is gone has nobody to tell
            errors.note("node link: closing the rendezvous", exc)

    def leave(self, handler: rendezvous.Handler, r: rendezvous.Round | None) -> None:
        """The run is over here: a stop not yet told, a last beat (done), then torch's
        shutdown (c10d: it closes the rendezvous)."""
        b = self.board
        try:
            if r is not None and not self.broken:
                with b.lock:
                    stop_why = b.stop_why
                if stop_why is not None and not self.stop_sent:
                    rendezvous.ask_stop(r.store, stop_why)
                rendezvous.beat(r.store, r.group_rank, self.count + 1, "done")
                if r.group_world > 1:
                    time.sleep(LINGER_S)  # read by the others before this node (and a store it hosts) goes
            handler.shutdown()
        except Exception as exc:  # noqa: BLE001 - leaving: a store that is gone has nothing to tell
            errors.note("node link: leaving the round", exc)
