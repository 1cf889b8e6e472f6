"""Several nodes as one Source (the TUI's sources.source protocol): every rank of
every node by global rank, actions routed to the rank's node, and each node's reachability.
No textual here: the merge itself is sources.multinode.combine (pure).

Each node has a thread of its own (NodePoller) that polls it when the screen asks, so a slow
or lost node never holds up the others: `status()` asks every node, waits a moment for the
answers and merges what it has. A node that cannot be reached (ssh lost, host down) keeps
its last status, shown as unreachable with the reason, and is connected again with a
growing pause (RETRY_S), until it answers or its run has ended: it comes back without
restarting the TUI. Attaching to one node of a multi-node run finds the others from its
status (RunInfo.node's peers) and opens them too, each through ssh to its host.

status/events/history/logs/gpu_timeline/act run on the TUI's worker threads; NodePoller's
loop on its own thread. Shared state is guarded by one lock per node and one for the events.
"""
from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from mpwatch.contract import EventFields, GpuTimelineReply, RunState, Status, straggler
from mpwatch.rundir import layout, registry
from mpwatch.rundir.textfiles import read_json
from mpwatch.sources.local import Client, ClientError, ControlReply, EventsReply, Requests
from mpwatch.sources.multinode import combine
from mpwatch.sources.remote.client import LinkLost, RemoteClient, RunEnded, Target, Transport

RETRY_S = (1.0, 2.0, 4.0, 8.0, 15.0)  # pauses between attempts to reach a lost node, then the last
FRESH_WAIT_S = 1.0  # how long status() waits for the nodes' answers before merging what it has
EVENTS_KEPT = 2000
Connect = Callable[[], Requests]


class NoNodeYet(Exception):
    """No node has answered yet."""


class LocalLink(Client):
    """A run on this machine, as a node: a lost socket is the run's end when its run.json
    says so (with its final.json), else a lost link."""

    def request(self, cmd: str, /, **args: object) -> dict[str, Any]:
        try:
            return super().request(cmd, **args)
        except ClientError as exc:
            if registry.run_ended(self.handle.run_dir, self.handle.pid):
                info = read_json(self.handle.run_dir, layout.RUN_JSON) or {}
                final = read_json(self.handle.run_dir, layout.FINAL_JSON)
                raise RunEnded(str(exc), cast("Status | None", final), info) from None
            raise LinkLost(str(exc)) from None


class NodePoller:
    """One node: its connection, its last status and events, whether it can be reached."""

    def __init__(self, host: str, run: str | None, connect: Connect, link: Requests | None = None,
                 node: int | None = None, status: Status | None = None):
        self.host = host
        self.run = run
        self.node = node  # known once reached (its NodeInfo), else the caller's numbering
        self.connect = connect
        self.link = link
        self.tail: int | None = None
        self.status = status  # the last one it sent
        self.events: list[EventFields] = []  # not yet taken by the merged source
        self.seq = 0  # its own events' seq: per node, never compared with another's
        self.error: str | None = None if link is not None else "connecting…"
        self.down_since: float | None = None if link is not None else time.monotonic()
        self.ended: RunEnded | None = None
        self.tries = 0
        self.lock = threading.Lock()
        self.want = threading.Event()
        self.fresh = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"mpwatch-node-{host}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.want.set()
        link, self.link = self.link, None
        if link is not None:
            link.close()

    def part(self) -> combine.NodePart:
        with self.lock:
            down = None if self.down_since is None else time.monotonic() - self.down_since
            return combine.NodePart(self.node or 0, self.host, self.status, self.error, down,
                                    self.ended is not None)

    def _loop(self) -> None:
        while not self._stop.is_set() and self.ended is None:
            self.want.wait()
            self.want.clear()
            if self._stop.is_set():
                return
            if self.link is None and not self._reconnect():
                self.fresh.set()
                continue
            self._poll()
            self.fresh.set()

    def _reconnect(self) -> bool:
        # the first try at once, then RETRY_S's pauses in turn (the first of them after the first try)
        pause = RETRY_S[min(self.tries - 1, len(RETRY_S) - 1)] if self.tries else 0.0
        if self._stop.wait(pause):
            return False
        self.tries += 1
        try:
            link = self.connect()
        except ClientError as exc:
            with self.lock:
                self.error = str(exc)
            return False
        if self._stop.is_set():
            link.close()
            return False
        self.link = link
        return True

    def _poll(self) -> None:
        link = self.link
        assert link is not None
        try:
            st = link.status(tail=self.tail)
            ev = link.events(self.seq)
        except RunEnded as exc:
            with self.lock:
                self.ended, self.error, self.down_since = exc, None, None
                if exc.final is not None:
                    self.status = exc.final
            return
        except ClientError as exc:  # LinkLost, or a refusal: either way this link is done
            self.link = None
            link.close()
            with self.lock:
                self.error = str(exc)
                if self.down_since is None:
                    self.down_since = time.monotonic()
            return
        with self.lock:
            self.status, self.error, self.down_since, self.tries = st, None, None, 0
            self.events += ev["events"]
            self.seq = max(self.seq, ev["seq"])
            info = st["run"].get("node")
            if info is not None:
                self.node = info["node_rank"]


class MergedSource:
    """The Source of a merged view: nodes added by `add` (and found through their peers)."""

    def __init__(self, transport: Transport):
        self.transport = transport  # how to reach a node on another machine (settings.Settings.ssh)
        self.nodes: list[NodePoller] = []
        self._lock = threading.Lock()
        self._events: collections.deque[EventFields] = collections.deque(maxlen=EVENTS_KEPT)
        self._seq = 0
        self._maps: dict[int, combine.NodeMap] = {}
        self._standing = straggler.Standing()  # the straggler finding across the nodes, look after look
        self._closed = False

    # ----------------------------------------------------------------- nodes ----
    def add(self, host: str, run: str | None, link: Requests | None = None, node: int | None = None,
            status: Status | None = None) -> NodePoller:
        """A node to watch: host "" is this machine (run: its directory here); link and
        status when the caller has reached it already."""
        def connect() -> Requests:
            if not host:  # a run here: its directory
                if run is None:
                    raise ClientError("a run on this machine is added by its directory")
                return LocalLink.at(run)
            return RemoteClient(Target(host, run), self.transport)
        n = NodePoller(host, run, connect, link, len(self.nodes) if node is None else node, status)
        with self._lock:
            self.nodes.append(n)
        n.start()
        return n

    def _discover(self) -> None:
        """Peers named by any node's status that are not watched yet."""
        with self._lock:
            known = {n.node for n in self.nodes}
        for n in list(self.nodes):
            st = n.status
            info = st["run"].get("node") if st is not None else None
            for peer in info["peers"] if info else []:
                if peer["node_rank"] not in known:
                    known.add(peer["node_rank"])
                    self.add(peer["host"], peer["run_id"], node=peer["node_rank"])

    def close(self) -> None:
        self._closed = True
        for n in self.nodes:
            n.close()

    # ---------------------------------------------------------------- reads ----
    def _refresh(self, tail: int | None) -> None:
        nodes = list(self.nodes)
        for n in nodes:
            n.tail = tail
            n.fresh.clear()
            n.want.set()
        deadline = time.monotonic() + FRESH_WAIT_S
        for n in nodes:  # a node being reconnected is not waited for: its row says so
            if n.ended is None and n.link is not None:
                n.fresh.wait(max(0.0, deadline - time.monotonic()))

    def _parts(self) -> list[combine.NodePart]:
        return [n.part() for n in self.nodes]

    def status(self, tail: int | None = None) -> Status:
        if self._closed:
            raise ClientError("the merged view is closed")
        self._refresh(tail)
        self._discover()
        parts = self._parts()  # one look at the nodes: the events, the status and the routes agree
        self._maps = combine.maps(parts)
        self._take_events()
        if self.nodes and all(n.ended is not None for n in self.nodes):
            raise ClientError("the run has ended on every node")
        st = combine.merge(parts, self._seq, self._maps, self._standing)
        if st is None:  # not the run's end: the poller says so and tries again
            why = "; ".join(f"{n.host or 'here'}: {n.error}" for n in self.nodes if n.error)
            raise NoNodeYet(f"no node reached yet ({why})")
        return st

    def _take_events(self) -> None:
        """The nodes' new events, by global rank (self._maps: this poll's ranks)."""
        with self._lock:
            for n in self.nodes:
                with n.lock:
                    taken, n.events = n.events, []
                m = self._maps.get(n.node or 0)
                for rec in taken:
                    if m is None:
                        continue
                    self._seq += 1
                    out = combine.event(rec, m)
                    out["seq"] = self._seq
                    self._events.append(out)

    def events(self, since: int = 0) -> EventsReply:
        with self._lock:
            return {"events": [e for e in self._events if e.get("seq", 0) > since], "seq": self._seq}

    def another(self) -> MergedSource:
        """Each node has its link: requests to several may be in flight at once."""
        return self

    def ended(self, stop: threading.Event | None = None) -> tuple[Status | None, dict[str, Any] | None]:
        """Once every node's run has ended: their final statuses merged, and how it ended."""
        st = combine.merge(self._parts(), self._seq)
        if st is None:
            return None, None
        run = st["run"]
        run["state"] = RunState.FINISHED
        return st, {"finished": True, "exit_code": run["exit_code"]}

    # ---------------------------------------------------------------- route ----
    def _route(self, rank: int) -> tuple[NodePoller, int]:
        for n in self.nodes:
            m = self._maps.get(n.node or 0)
            if m is None:
                continue
            for local, g in m.ranks.items():
                if g == rank:
                    return n, local
        raise ClientError(f"no rank {rank} on any node")

    @staticmethod
    def _link(n: NodePoller) -> Requests:
        link = n.link
        if link is None or n.ended is not None:
            raise ClientError(f"node {n.node} ({n.host or 'here'}) is "
                              + ("finished" if n.ended is not None else f"unreachable: {n.error}"))
        return link

    def history(self, rank: int) -> list[tuple[float, float]]:
        n, local = self._route(rank)
        return self._link(n).history(local)

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list[str]:
        n, local = self._route(rank)
        return self._link(n).logs(local, stream, lines)

    def gpu_timeline(self, window: float) -> GpuTimelineReply:
        got = []
        for n in self.nodes:
            m = self._maps.get(n.node or 0)
            if m is not None and n.link is not None and n.ended is None:
                try:
                    got.append((m, n.link.gpu_timeline(window)))
                except ClientError:
                    continue  # that node's charts stay empty; its row says why
        return combine.timeline(got, time.time())

    def act(self, cmd: str, target: int | str) -> str:
        if target == "all":
            return self._every(lambda link: link.act(cmd, "all"))
        if not isinstance(target, int):
            raise ClientError(f"bad target {target!r}")
        n, local = self._route(target)
        text = self._link(n).act(cmd, local)
        return f"node {n.node}: {text}" + (f" (global rank {target})" if local != target else "")

    def resize(self, n: int) -> str:
        if len(self.nodes) > 1:
            raise ClientError("a run of several nodes is resized on each node "
                              "(mpwatch ctl --host HOST resize N)")
        return self._link(self.nodes[0]).resize(n)

    def stop(self) -> str:
        return self._every(lambda link: link.stop())

    def ask(self, action: str, target: int | str, step: int | None = None, by: str = "?", plan: bool = False,
            **args: object) -> ControlReply:
        if target != "all":
            if not isinstance(target, int):
                raise ClientError(f"bad target {target!r}")
            n, local = self._route(target)
            got = self._link(n).ask(action, local, step, by, plan, **args)
            return {"step": got["step"], "message": f"node {n.node}: {got['message']}"}
        return self._everywhere(lambda link, s, p: link.ask(action, "all", s, by, p, **args), step, plan)

    def set_tunable(self, name: str, value: str, step: int | None = None, by: str = "?",
                    plan: bool = False) -> ControlReply:
        return self._everywhere(lambda link, s, p: link.set_tunable(name, value, s, by, p), step, plan)

    def _everywhere(self, call: Callable[[Requests, int | None, bool], ControlReply], step: int | None,
                    plan: bool) -> ControlReply:
        """A request every node takes at one step: each node's supervisor says the step it
        would pick, the latest wins (None if one has ranks without steps), then all get it."""
        if step is None and len(self.nodes) > 1:
            links = [self._link(n) for n in self.nodes if n.link is not None and n.ended is None]
            steps = [call(link, None, True)["step"] for link in links]
            step = None if not steps or None in steps else max(s for s in steps if s is not None)
        if plan:
            return {"step": step, "message": ""}
        return {"step": step, "message": self._every(lambda link: call(link, step, False)["message"])}

    def _every(self, call: Callable[[Requests], str]) -> str:
        """The call on every node that can take it; what each said, or why not."""
        said, failed = [], 0
        for n in sorted(self.nodes, key=lambda n: n.node or 0):
            try:
                said.append(f"node {n.node}: {call(self._link(n))}")
            except ClientError as exc:
                failed += 1
                said.append(f"node {n.node}: {exc}")
        if failed == len(self.nodes):
            raise ClientError("; ".join(said))
        return "; ".join(said)

