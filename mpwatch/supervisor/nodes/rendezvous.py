"""torch.distributed's rendezvous, as a multi-node supervisor uses it: the one room of the
supervisor that loads torch, lazily (importlib, on the node thread of supervisor.nodes.cluster),
so that one-node runs, the TUI, `ctl` and `--help` never do.

Membership and node ranks come from torch's own handlers (static: the node rank given;
c10d: ranks assigned by the rendezvous, a new round when a node asks for one), made by
torch's registry from RendezvousParameters, exactly as torchrun makes them. Everything the
supervisors say to each other goes through the store the round hands out, under
`mpwatch/` keys: each node's record (where its supervisor lives, how many workers it has),
a heartbeat, a stop request. No listener of ours.

Global ranks follow torch's elastic agent (agent/server/api.py `_assign_worker_ranks`):
a node's workers take the ranks after those of every node before it in group-rank order.

torch's objects are typed here by the Protocols of what mpwatch calls on them; mypy never
reads torch (it is the demo extra, and reading it costs a cold lint 20 s).
"""
from __future__ import annotations

import importlib
import json
import logging
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol, cast

from mpwatch.contract import NodePeer, numtext
from mpwatch.supervisor import errors
from mpwatch.supervisor.options import NodesOptions

KEY_NODE = "mpwatch/node/"  # + group rank: that node's NodePeer, as JSON
KEY_BEAT = "mpwatch/beat/"  # + group rank: "<count> <up|done>", rewritten every beat
KEY_STOP = "mpwatch/stop"  # why the run stops, set by the node where the stop was asked
SHARE_SWITCH = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"  # read by torch's c10d handler at every round


class Store(Protocol):
    """torch.distributed.Store: what mpwatch uses of it."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...

    def multi_get(self, keys: list[str]) -> list[bytes]: ...


class StoreInfo(Protocol):
    master_addr: str
    master_port: int


class Info(Protocol):
    """torch's RendezvousInfo (read only: it comes from Handler.next_rendezvous)."""

    store: Store
    rank: int
    world_size: int
    bootstrap_store_info: StoreInfo | None


class Handler(Protocol):
    """torch's RendezvousHandler."""

    @property
    def use_agent_store(self) -> bool: ...

    def next_rendezvous(self) -> Info: ...

    def num_nodes_waiting(self) -> int: ...

    def set_closed(self) -> None: ...

    def is_closed(self) -> bool: ...

    def shutdown(self) -> bool: ...

    def get_run_id(self) -> str: ...


class RendezvousFailed(Exception):
    """The rendezvous or its store failed; the message is one line for the user."""


class RendezvousClosed(RendezvousFailed):
    """The rendezvous was closed: a node ended the run."""


def _load_quietly() -> tuple[ModuleType, ModuleType]:
    """torch's rendezvous modules. torch's C++ store logs every hiccup of a node going away
    (with a stack trace) and its elastic loggers warn: the supervisor says what matters in
    its own events. C++ reads its log level once, when torch loads: it is set for this
    process only, and the workers' environment (made from os.environ) never sees it."""
    own = "TORCH_CPP_LOG_LEVEL" not in os.environ
    if own:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        api = importlib.import_module("torch.distributed.elastic.rendezvous")
        registry = importlib.import_module("torch.distributed.elastic.rendezvous.registry")
    finally:
        if own:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    return api, registry


def make_handler(opts: NodesOptions) -> Handler:
    """torch's handler for this node, as torchrun makes it (loads torch: node thread).

    One difference, for c10d: torch's handler shares one store with the workers across
    rounds by default, so the keys of a round's process group (gloo's peer addresses)
    outlive it, and a worker of the next round can read a dead peer's address (seen here:
    connectFullMesh refused). torch's own switch TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives
    every round a fresh store on a fresh port; mpwatch sets it unless the user did."""
    if opts.backend == "c10d":
        os.environ.setdefault(SHARE_SWITCH, "1")
    api, registry = _load_quietly()
    conf: dict[str, object] = dict(opts.conf)
    if opts.backend == "static":
        conf["rank"] = opts.node_rank
    params = api.RendezvousParameters(backend=opts.backend, endpoint=opts.endpoint, run_id=opts.rdzv_id,
                                      min_nodes=opts.min_nodes, max_nodes=opts.max_nodes,
                                      local_addr=opts.local_addr, **conf)
    try:
        return cast(Handler, registry.get_rendezvous_handler(params))
    except Exception as exc:  # noqa: BLE001 - torch's errors vary by backend: say them in one line
        errors.note("rendezvous handler", exc)
        raise failure(exc) from None


def failure(exc: BaseException) -> RendezvousFailed:
    """torch's exception as one line (RendezvousClosed for a closed rendezvous)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if type(exc).__name__ == "RendezvousClosedError":
        return RendezvousClosed(text)
    return RendezvousFailed(text)


@dataclass(frozen=True)
class Round:
    """A rendezvous round as this node joined it."""

    number: int  # 0 for the first; c10d makes a new one for every restart of the workers
    group_rank: int
    group_world: int
    base_rank: int  # global rank of this node's local rank 0
    world: int  # every node's workers
    master_addr: str  # the workers' MASTER_ADDR/MASTER_PORT (torch's bootstrap store)
    master_port: int
    agent_store: bool  # that store is the supervisor's: workers connect to it as clients
    peers: list[NodePeer]  # every node, by group rank, this one included
    store: Store


def join(handler: Handler, me: NodePeer, number: int) -> Round:
    """Blocks until every node has joined (node thread): torch's next_rendezvous, then each
    node's record through the round's store, and the global ranks from them."""
    try:
        info = handler.next_rendezvous()
        store, rank, n = info.store, info.rank, info.world_size
        mine = me.copy()
        mine["node_rank"] = rank  # c10d assigns the rank: the record says the one it got
        beat(store, rank, 0, "up")  # before the record: a node that reads every record finds every beat
        store.set(f"{KEY_NODE}{rank}", json.dumps(mine))
        peers = [cast(NodePeer, json.loads(raw))
                 for raw in store.multi_get([f"{KEY_NODE}{i}" for i in range(n)])]
        boot = info.bootstrap_store_info
        agent_store = bool(handler.use_agent_store)
    except RendezvousFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - torch's rendezvous and store errors: one line
        errors.note("rendezvous round", exc)
        raise failure(exc) from None
    bases = [sum(p.get("nprocs", 0) for p in peers[:i]) for i in range(n)]
    for p, base in zip(peers, bases, strict=True):
        p["base_rank"] = base
    if boot is None:
        raise RendezvousFailed("the rendezvous gave no address for the workers' store")
    return Round(number=number, group_rank=rank, group_world=n, base_rank=bases[rank],
                 world=sum(p.get("nprocs", 0) for p in peers), master_addr=boot.master_addr,
                 master_port=int(boot.master_port), agent_store=agent_store, peers=peers, store=store)


def beat(store: Store, group_rank: int, count: int, state: str) -> None:
    store.set(f"{KEY_BEAT}{group_rank}", f"{count} {state}")


def beats(store: Store, n: int) -> list[tuple[int, str]]:
    """Every node's last beat: (count, up | done) (join() wrote a first one for each)."""
    out = []
    for raw in store.multi_get([f"{KEY_BEAT}{i}" for i in range(n)]):
        count, _, state = raw.decode(errors="replace").partition(" ")
        number = numtext.int_of(count)  # a peer's word: ASCII digits within a bound, else none
        out.append((-1 if number is None else number, state))
    return out


def ask_stop(store: Store, why: str) -> None:
    store.set(KEY_STOP, why)


def stop_asked(store: Store) -> str | None:
    """Why another node stopped the run, or None."""
    if not store.check([KEY_STOP]):
        return None
    return store.get(KEY_STOP).decode(errors="replace")
