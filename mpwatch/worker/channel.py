"""This process's channel to its supervisor: what the supervisor gave the process
(`ChannelConfig`, from its environment), what the process holds for it (`ProcessState`: the
report buffer, the phase totals and their timers, the connection, the sender thread), and the fork handling
that gives a forked child a fresh `ProcessState` and keeps a fork out of the sender's imports.

Imports none of its siblings: the sender thread (worker.sender), the calls of the training loop
(worker.api, worker.control) and the automatic steps (worker.auto) all hold a `Channel`. Its
state is shared without a lock by the training thread (report() appends to the buffer) and the
sender thread (it drains the buffer); `lock` only guards starting the thread.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections import deque

# Types for the checker only: `import mpwatch` must stay cheap, and `typing` alone costs
# milliseconds at start-up (mypy reads this constant as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from typing import Literal, Protocol, TypeVar

    from mpwatch.contract import CudaView, OomRecord

    Entry = tuple[int, float, int | None, object, dict[str, object]]  # seq, wall time, step, loss, metrics
    CudaSource = Callable[[], CudaView | None]
    _T = TypeVar("_T")

    class Sender(Protocol):
        """The sender thread's side (worker.sender.Sender)."""

        def run(self) -> None: ...
        def close(self) -> None: ...

    class Answers(Protocol):
        """What control requests left for the next batch, and the actions run at step
        boundaries (worker.control_state.ControlState)."""

        def take(self) -> list[list[object]]: ...
        def give_back(self, entries: list[list[object]]) -> None: ...
        def at_step(self, step: int) -> None: ...

# How often the sender ships a batch: one frame per flush, and the supervisor's cost is
# mostly per frame. The supervisor sets it by the run's size (protocol.flush_interval).
FLUSH_S = 0.25
# Reports kept between two flushes; when a loop reports faster than BUFFER per flush
# the oldest are dropped and counted. The bound also caps the sender's per-flush work,
# which otherwise competes with the training loop for the GIL.
BUFFER = 2048
OOMS_PENDING = 16  # OOM records kept for the next batches (a flush sends protocol.OOM_MAX of them)
# The longest a fork waits for the sender's import to end (one of a few small modules, or
# torch's allocator view: milliseconds); past it the fork goes on, as without mpwatch.
FORK_WAIT_S = 5.0
NEVER = 1 << 62  # ProcessState.act_due while no action waits for a step


def drain(box: deque[_T], most: int) -> list[_T]:
    """Up to `most` of what waits in `box`, oldest first: the sender thread takes what another
    thread appends (no lock: a deque's popleft and append are atomic)."""
    out: list[_T] = []
    while box and len(out) < most:
        try:
            out.append(box.popleft())
        except IndexError:
            break
    return out


class PhaseTimer:
    """Times one named phase into its process's totals (worker.api's phase())."""

    __slots__ = ("name", "t0", "totals")

    def __init__(self, name: str, totals: dict[str, float]):
        self.name = name
        self.totals = totals
        self.t0 = 0.0

    def __enter__(self) -> PhaseTimer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        totals = self.totals
        totals[self.name] = totals.get(self.name, 0.0) + (time.perf_counter() - self.t0)
        return False


class ChannelConfig:
    """What the supervisor gave this process (its environment): the same in a forked child."""

    __slots__ = ("address", "authkey", "flush_s", "rank")

    def __init__(self, address: str, authkey: bytes, rank: int, flush_s: float = FLUSH_S):
        self.address = address
        self.authkey = authkey
        self.rank = rank
        self.flush_s = flush_s


class ProcessState:
    """What this process holds for its channel; a forked child starts with a new one."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # This process's current step: the last one reported. Every source of steps sets it
        # (report(); the automatic steps too, a forked child's from 0): worker.control compares
        # it with a request's.
        self.step = -1
        # The step at which a step boundary must run the control's actions (worker.actions: a
        # profile starts or stops there); the sender lowers it when one comes. One compare a step.
        self.act_due = NEVER
        self.buf: deque[Entry] = deque(maxlen=BUFFER)
        self.seq = itertools.count()
        self.phases: dict[str, float] = {}
        self.phase_cache: dict[str, PhaseTimer] = {}  # phase() allocates nothing after a name's first call
        # the automatic steps' GPU times (worker.auto.gpu_times), added by the sender thread alone
        self.gpu_phases: dict[str, float] = {}
        self.conn: Connection | None = None
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.last_sent_seq = -1
        self.last_phases: dict[str, float] | None = None
        self.next_cuda = 0.0
        # CUDA OOMs the process saw (worker.cuda_memory), for the next batch; the oldest go past the bound
        self.ooms: deque[OomRecord] = deque(maxlen=OOMS_PENDING)
        self.retry_at = 0.0
        self.explicit = -1  # seq of the first report() with a step or a loss: automatic steps stop there
        self.auto = False  # worker.auto sent steps
        # Held by the sender thread while it imports (or lets torch import) and by a fork while it
        # forks: a fork in the middle of an import left the child that module's lock, held by a
        # thread the child does not have, and its first flush hung on it for ever. A child gets
        # its own: the parent's, held by the fork, is never released there.
        self.imports = threading.Lock()
        self.forking = threading.local()  # .held: this thread's fork holds `imports`


class Channel:
    """This process's connection to the supervisor: its configuration, its per-process state,
    and what lives as long as the process's memory (a forked child keeps them)."""

    def __init__(self, config: ChannelConfig, cuda_source: CudaSource | None = None, quiet: bool = False):
        self.config = config
        self.state = ProcessState()
        self.cuda_source: CudaSource | None = cuda_source  # None: torch's, made when first needed
        self.sender: Sender | None = None  # the thread's work (worker.sender), set by whoever starts it
        self.control: Answers | None = None  # worker.control's state, once used or once a request came
        self.mp_exit = False  # multiprocessing's children flush at their exit (before_fork)
        self.quiet = quiet  # its hello promises no reports (protocol.ENV_HOOK_ONLY)

    def start(self) -> None:
        """Start this process's sender thread, once (a forked child starts its own)."""
        s = self.state
        with s.lock:
            if s.thread is not None or self.sender is None:
                return
            s.thread = threading.Thread(target=self.sender.run, name="mpwatch-sender", daemon=True)
            s.thread.start()

    def close(self) -> None:
        """At the process's exit: what is left is flushed (worker.sender)."""
        if self.sender is not None:
            self.sender.close()

    # -- fork handling (os.register_at_fork, on the forking thread) ------------------------
    def reset(self) -> None:
        """In a forked child: a fresh buffer and no connection."""
        self.state = ProcessState()

    def hold_imports(self) -> None:
        """Before a fork: wait for the sender's import to end. Bounded: a sender importing a
        module this thread's own import holds must not hang the fork."""
        s = self.state
        s.forking.held = s.imports.acquire(timeout=FORK_WAIT_S)

    def release_imports(self) -> None:
        """In the parent, after the fork."""
        s = self.state
        if getattr(s.forking, "held", False):
            s.forking.held = False
            s.imports.release()

    def before_fork(self) -> None:
        """A child of multiprocessing (a Hogwild trainer) ends with os._exit, without atexit:
        its last reports are flushed by a finalizer of multiprocessing's, set in the child."""
        util = sys.modules.get("multiprocessing.util")
        if util is not None and not self.mp_exit:
            self.mp_exit = True
            util.register_after_fork(self, Channel._in_mp_child)

    def _in_mp_child(self) -> None:
        sys.modules["multiprocessing.util"].Finalize(None, self.close, exitpriority=0)
