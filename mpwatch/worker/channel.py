"""The worker side: buffered reports and phase timings sent over this process's channel.

`report()` only appends to a bounded deque; a daemon sender thread ships batches to the
supervisor every flush interval (0.25 s; longer in wide runs, as the supervisor sets). The
training loop therefore never waits on the supervisor: if it is slow or gone, the deque
drops its oldest entries and the gaps in the sequence numbers tell the supervisor how many
were dropped. Each batch's reports are bounded and coerced there, on the sender thread
(mpwatch.worker.bounds: a 1 MB metric is cut, 10**400 goes as a float), so that no report
costs the batch it travels in; mpwatch.worker.batch shapes the batch.

The sender starts when mpwatch is imported and says hello at once: the supervisor then
knows the process will report, and its start-up limit (a slow start, never a stall) applies
until the first report. A process forked from a worker (DataLoader worker, mp.Process)
starts with a fresh buffer and opens its own channel on its first report; spawned children
import mpwatch afresh and connect the same way. The supervisor tells worker from child by pid.
Each batch says whether torch.distributed is initialised in the process (read on the sender
thread, only when the script already imported it): its ranks then share a process group.

Scripts that never call report() get automatic steps from mpwatch.worker.auto (its hooks call
`auto_step` on the training thread: the same buffer, flagged `auto` in the batch) until the
process reports a step or a loss itself, which wins. An automatic step's loss may be a tensor
the sender reads when it flushes (mpwatch.worker.auto.loss: never on the training thread). mpwatch.worker.auto
imports this module right after `import torch`, so a torch script's first optimizer step is
its first report and the start-up limit holds until then.
"""
from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
from collections import deque

from mpwatch.contract import protocol

# Types for the checker only: `import mpwatch` must stay cheap, and `typing` alone costs
# milliseconds at start-up (mypy reads this constant as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from typing import Literal

    from mpwatch.contract.status import CudaView
    from mpwatch.worker.control_state import Live

    Entry = tuple[int, float, int | None, object, dict[str, object]]  # seq, wall time, step, loss, metrics
    CudaSource = Callable[[], CudaView | None]

# How often the sender ships a batch: one frame per flush, and the supervisor's cost is
# mostly per frame. The supervisor sets it by the run's size (protocol.flush_interval).
FLUSH_S = 0.25
# Reports kept between two flushes; when a loop reports faster than BUFFER per flush
# the oldest are dropped and counted. The bound also caps the sender's per-flush work,
# which otherwise competes with the training loop for the GIL.
BUFFER = 2048
# The longest a fork waits for the sender's import to end (one of a few small modules, or
# torch's allocator view: milliseconds); past it the fork goes on, as without mpwatch.
FORK_WAIT_S = 5.0
FAKE_CUDA_ENV = "MPWATCH_FAKE_CUDA"  # TEST-ONLY: a scripted allocator view (testing.scripted_cuda)


def _noop_report(step: int | None = None, loss: object = None, **metrics: object) -> None:
    return None


class _NoPhase:
    __slots__ = ()

    def __enter__(self) -> _NoPhase:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


_NO_PHASE = _NoPhase()


class _Phase:
    """Times one named phase; instances are cached per name so `with` allocates nothing."""

    __slots__ = ("name", "t0", "totals")

    def __init__(self, name: str, totals: dict[str, float]):
        self.name = name
        self.totals = totals
        self.t0 = 0.0

    def __enter__(self) -> _Phase:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        totals = self.totals
        totals[self.name] = totals.get(self.name, 0.0) + (time.perf_counter() - self.t0)
        return False


class _Channel:
    """State of this process's connection to the supervisor."""

    def __init__(self, address: str, authkey: bytes, rank: int, flush_s: float = FLUSH_S,
                 cuda_source: CudaSource | None = None):
        self.flush_s = flush_s
        self.address = address
        self.authkey = authkey
        self.rank = rank
        self.cuda_source: CudaSource | None = cuda_source  # None: torch's, made when first needed
        self.pid = os.getpid()
        # This process's current step: the last one reported. Every source of steps sets it
        # (report() here; the automatic steps too): mpwatch.worker.control compares it with a request's.
        self.step = -1
        self.live: Live | None = None  # mpwatch.worker.control's state, once used or once a request came
        self.buf: deque[Entry] = deque(maxlen=BUFFER)
        self.seq = itertools.count()
        self.phases: dict[str, float] = {}
        self.phase_cache: dict[str, _Phase] = {}
        self.conn: Connection | None = None
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.last_sent_seq = -1
        self.last_phases: dict[str, float] | None = None
        self.next_cuda = 0.0
        self.retry_at = 0.0
        self.explicit = -1  # seq of the first report() with a step or a loss: automatic steps stop there
        self.auto = False  # mpwatch.worker.auto sent steps
        self.mp_exit = False  # multiprocessing's children flush at their exit (before_fork)
        # Held by the sender thread while it imports (or lets torch import) and by a fork while it
        # forks: a fork in the middle of an import left the child that module's lock, held by a
        # thread the child does not have, and its first flush hung on it for ever.
        self.imports = threading.Lock()
        self.forking = threading.local()  # .held: this thread's fork holds `imports`

    def reset(self) -> None:
        """In a forked child (register_at_fork): a fresh buffer and no connection."""
        self.pid = os.getpid()
        self.step = -1  # a forked child counts its own steps (mpwatch.worker.auto's from 0)
        self.buf = deque(maxlen=BUFFER)
        self.seq = itertools.count()
        self.phases = {}
        self.phase_cache = {}
        self.conn = None
        self.thread = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.last_sent_seq = -1
        self.last_phases = None
        self.next_cuda = 0.0
        self.retry_at = 0.0
        self.explicit = -1  # seq of the first report() with a step or a loss: automatic steps stop there
        self.auto = False  # mpwatch.worker.auto sent steps
        self.imports = threading.Lock()  # the parent's, held by the fork, is never released here
        self.forking = threading.local()

    def hold_imports(self) -> None:
        """Before a fork (register_at_fork): wait for the sender's import to end. Bounded: a
        sender importing a module this thread's own import holds must not hang the fork."""
        self.forking.held = self.imports.acquire(timeout=FORK_WAIT_S)

    def release_imports(self) -> None:
        """In the parent, after the fork."""
        if getattr(self.forking, "held", False):
            self.forking.held = False
            self.imports.release()

    def before_fork(self) -> None:
        """A child of multiprocessing (a Hogwild trainer) ends with os._exit, without atexit:
        its last reports are flushed by a finalizer of multiprocessing's, set in the child."""
        util = sys.modules.get("multiprocessing.util")
        if util is not None and not self.mp_exit:
            self.mp_exit = True
            util.register_after_fork(self, _Channel._in_mp_child)

    def _in_mp_child(self) -> None:
        sys.modules["multiprocessing.util"].Finalize(None, self.close, exitpriority=0)

    # -- sender thread -------------------------------------------------------------
    def start(self) -> None:
        with self.lock:
            if self.thread is not None:
                return
            self.thread = threading.Thread(target=self._run, name="mpwatch-sender", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        if self.conn is None:
            self._connect()  # hello now: the supervisor learns this process speaks the protocol
        while not self.stop.wait(self.flush_s):
            self.flush()

    def _connect(self) -> bool:
        now = time.monotonic()
        if now < self.retry_at:
            return False
        with self.imports:
            from multiprocessing.connection import Client

        try:
            self.conn = conn = Client(self.address, family="AF_UNIX", authkey=self.authkey)
            conn.send_bytes(
                protocol.encode(
                    {"t": protocol.HELLO, "v": protocol.VERSION, "rank": self.rank,
                     "pid": os.getpid(), "ppid": os.getppid()}
                )
            )
            return True
        except (OSError, EOFError, ValueError):
            self.conn = None
            self.retry_at = now + 1.0  # the supervisor is gone or restarting: try later
            return False
        except Exception:  # noqa: BLE001 - AuthenticationError and friends: never raise into training
            self.conn = None
            self.retry_at = now + 5.0
            return False

    def flush(self) -> None:
        buf = self.buf
        if self.conn is not None:
            self._read_requests()
        lv = self.live
        live = lv.take() if lv is not None else None
        if not buf and self.phases == self.last_phases and not live:
            return
        if self.conn is None and not self._connect():
            if live and lv is not None:
                lv.give_back(live)
            return
        conn = self.conn
        assert conn is not None  # _connect() succeeded
        with self.imports:
            from mpwatch.worker import batch  # each report bounded there, never in report()

        items = batch.drain(buf)
        dropped = 0
        if items:
            # The deque only ever drops its oldest entries, so every gap in the sequence
            # numbers, whether before items[0] or between items, adds up to this.
            dropped = items[-1][0] - self.last_sent_seq - len(items)
            self.last_sent_seq = items[-1][0]
        phases = dict(self.phases)
        msg = batch.frame(self, items, dropped, phases, live)
        try:
            conn.send_bytes(protocol.encode_lossy(msg))
            self.last_phases = phases
        except (OSError, EOFError, ValueError):
            if live and lv is not None:
                lv.give_back(live)
            self._lost()

    def _lost(self) -> None:
        try:
            if self.conn is not None:
                self.conn.close()
        except OSError:
            pass
        self.conn = None
        self.retry_at = time.monotonic() + 1.0

    def _read_requests(self) -> None:
        """The supervisor's requests (protocol 2), read without waiting, for mpwatch.worker.control."""
        conn = self.conn
        try:
            while conn is not None and conn.poll(0):
                msg = protocol.decode(conn.recv_bytes(protocol.MAX_FRAME))
                with self.imports:
                    from mpwatch.worker.control_state import attach  # stdlib; loaded by the first request

                attach(self).receive(msg)
        except protocol.BadFrame:
            pass  # the supervisor's own frame: never expected, never worth ending training for
        except (OSError, EOFError, ValueError):
            self._lost()

    def close(self) -> None:
        """Flush what is left at normal interpreter exit, briefly: exit must not hang."""
        if self.pid != os.getpid():
            return
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=1.0)
            if self.thread.is_alive():
                return  # stuck sending to a supervisor that does not read: do not hang exit
            self.flush()
        if self.conn is not None:
            try:
                self.conn.send_bytes(protocol.encode({"t": protocol.BYE}))
                self.conn.close()
            except (OSError, EOFError, ValueError):
                pass


def _make_api(chan: _Channel) -> tuple[Callable[..., None], Callable[[str], _Phase]]:
    buf_holder = chan  # the channel object survives fork; its buffer is replaced
    clock = time.time

    def report(step: int | None = None, loss: object = None, **metrics: object) -> None:
        """Record progress; returns at once. `loss` may be a float or a 0-d tensor."""
        if loss is not None and type(loss) is not float:
            detach = getattr(loss, "detach", None)
            if callable(detach):
                loss = detach()  # do not keep the autograd graph alive
        c = buf_holder
        seq = next(c.seq)
        if type(step) is int:
            c.step = step
        if c.explicit < 0 and (step is not None or loss is not None):
            c.explicit = seq
        c.buf.append((seq, clock(), step, loss, metrics))
        if c.thread is None:
            c.start()

    def phase(name: str) -> _Phase:
        """Context manager timing a phase of the step ("data", "compute", "sync", ...)."""
        c = buf_holder
        p = c.phase_cache.get(name)
        if p is None:
            p = c.phase_cache[name] = _Phase(name, c.phases)
        return p

    return report, phase


def _setup() -> _Channel | None:
    address = os.environ.get(protocol.ENV_ADDRESS)
    key = os.environ.get(protocol.ENV_AUTHKEY)
    if not address or not key:
        return None
    try:
        rank = int(os.environ.get(protocol.ENV_RANK, os.environ.get("RANK", "0")))
        authkey = bytes.fromhex(key)
    except ValueError:
        return None
    try:
        flush_s = float(os.environ.get(protocol.ENV_FLUSH, FLUSH_S))
    except ValueError:
        flush_s = FLUSH_S
    if not 0.01 <= flush_s <= 10.0:  # also NaN
        flush_s = FLUSH_S
    source: CudaSource | None = None
    fake = os.environ.get(FAKE_CUDA_ENV)
    if fake:
        from mpwatch.testing.scripted_cuda import FakeCuda  # TEST-ONLY

        source = FakeCuda(fake, rank)
    chan = _Channel(address, authkey, rank, flush_s, source)
    os.register_at_fork(before=chan.before_fork, after_in_child=chan.reset)
    os.register_at_fork(before=chan.hold_imports, after_in_parent=chan.release_imports)
    chan.before_fork()  # a spawned child of multiprocessing: it imports mpwatch before its run
    atexit.register(chan.close)
    chan.start()  # a daemon thread: it says hello at once, then ships batches
    return chan


_channel = _setup()

report: Callable[..., None]
phase: Callable[[str], _Phase | _NoPhase]
if _channel is None:
    report = _noop_report

    def _no_phase(name: str) -> _NoPhase:
        return _NO_PHASE

    phase = _no_phase
else:
    report, phase = _make_api(_channel)


def active() -> bool:
    """True when this process runs under an mpwatch supervisor."""
    return _channel is not None


# -- automatic steps (mpwatch.worker.auto, on the training thread) ------------------------------
def auto_wanted() -> bool:
    """Automatic steps and losses are wanted: this process runs under mpwatch and has not
    reported a step or a loss itself."""
    c = _channel
    return c is not None and c.explicit < 0


def auto_step(step: int | None, loss: object, data_s: float, compute_s: float) -> None:
    """An automatic step (step None: a heartbeat between steps): into the buffer as report()
    would put it, unless the process reported itself; its time split goes to the phases unless
    the script times its own."""
    c = _channel
    if c is None:
        return
    if not c.phase_cache:
        ph = c.phases
        ph["data"] = ph.get("data", 0.0) + data_s
        ph["compute"] = ph.get("compute", 0.0) + compute_s
    if c.explicit >= 0:
        return
    c.auto = True
    if step is not None:
        c.step = step
    c.buf.append((next(c.seq), time.time(), step, loss, {}))
    if c.thread is None:
        c.start()
