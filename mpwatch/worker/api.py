"""The training loop's calls, report(), phase() and active(), and this process's channel, set up
at `import mpwatch` from the environment the supervisor gave the process.

report() returns at once: it appends to the channel's bounded buffer, which the sender thread
(worker.sender) ships. The sender starts when mpwatch is imported and says hello at once: the
supervisor then knows the process will report, and its start-up limit (a slow start, never a
stall) applies until the first report. A process forked from a worker (DataLoader worker,
mp.Process) starts with a fresh buffer and opens its own channel on its first report; spawned
children import mpwatch afresh and connect the same way. The supervisor tells worker from child
by pid. Each batch says whether torch.distributed is initialised in the process (worker.batch).

Scripts that never call report() get automatic steps from worker.auto (its hooks call
`auto_step` on the training thread: the same buffer, flagged `auto` in the batch) until the
process reports a step or a loss itself, which wins. An automatic step's loss may be a tensor
the sender reads when it flushes (worker.auto.loss: never on the training thread). worker.auto
imports this module right after `import torch`, so a torch script's first optimizer step is
its first report and the start-up limit holds until then.

Outside mpwatch every call is a no-op. Runs on the training thread. Standard library only.
"""
from __future__ import annotations

import atexit
import os
import time

from mpwatch.contract import protocol
from mpwatch.worker.channel import FLUSH_S, Channel, ChannelConfig, PhaseTimer

# Types for the checker only: `import mpwatch` must stay cheap, and `typing` alone costs
# milliseconds at start-up (mypy reads this constant as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Literal


def _noop_report(step: int | None = None, loss: object = None, **metrics: object) -> None:
    return None


class _NoPhase:
    __slots__ = ()

    def __enter__(self) -> _NoPhase:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


_NO_PHASE = _NoPhase()


def _make_api(chan: Channel) -> tuple[Callable[..., None], Callable[[str], PhaseTimer]]:
    clock = time.time

    def report(step: int | None = None, loss: object = None, **metrics: object) -> None:
        """Record progress; returns at once. `loss` may be a float or a 0-d tensor."""
        if loss is not None and type(loss) is not float:
            detach = getattr(loss, "detach", None)
            if callable(detach):
                loss = detach()  # do not keep the autograd graph alive
        s = chan.state  # replaced in a forked child: read at each call
        seq = next(s.seq)
        if type(step) is int:
            s.step = step
            if step >= s.act_due:
                _at_step(chan, step)
        if s.explicit < 0 and (step is not None or loss is not None):
            s.explicit = seq
        s.buf.append((seq, clock(), step, loss, metrics))
        if s.thread is None:
            chan.start()

    def phase(name: str) -> PhaseTimer:
        """Context manager timing a phase of the step ("data", "compute", "sync", ...)."""
        s = chan.state
        p = s.phase_cache.get(name)
        if p is None:
            p = s.phase_cache[name] = PhaseTimer(name, s.phases)
        return p

    return report, phase


def _at_step(chan: Channel, step: int) -> None:
    """A step boundary where the control's actions are due (worker.actions: a profile starts or ends)."""
    ctl = chan.control
    if ctl is not None:
        ctl.at_step(step)


def _config() -> ChannelConfig | None:
    """The channel the supervisor gave this process, or None outside mpwatch."""
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
    return ChannelConfig(address, authkey, rank, flush_s)


def _setup() -> Channel | None:
    config = _config()
    if config is None:
        return None
    from mpwatch.worker import seam
    from mpwatch.worker.sender import Sender

    double = seam.cuda(config.rank)  # (CUDA view, torch) where the GPU seam is set, else None: torch's
    # mpwatch's start-up hook imports this module for the CUDA memory forensics alone: the script
    # promised no reports (protocol.ENV_HOOK_ONLY, set only while it imports)
    quiet = os.environ.pop(protocol.ENV_HOOK_ONLY, None) == "1"
    chan = Channel(config, double[0] if double else None, quiet=quiet)
    chan.sender = Sender(chan)
    if double is not None:
        _arm(double[1], chan)
    os.register_at_fork(before=chan.before_fork, after_in_child=chan.reset)
    os.register_at_fork(before=chan.hold_imports, after_in_parent=chan.release_imports)
    chan.before_fork()  # a spawned child of multiprocessing: it imports mpwatch before its run
    atexit.register(chan.close)
    chan.start()  # a daemon thread: it says hello at once, then ships batches
    return chan


def _arm(torch: Any, chan: Channel) -> None:
    """The GPU seam's torch (worker.seam) answers torch's CUDA calls: the memory forensics are
    armed on it as on a GPU (worker.cuda_memory; a real `import torch` later finds them armed)."""
    from mpwatch.worker import cuda_memory

    cuda_memory.arm(torch, chan)


_channel = _setup()

report: Callable[..., None]
phase: Callable[[str], PhaseTimer | _NoPhase]
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


# -- automatic steps (worker.auto, on the training thread) -------------------------------
def auto_wanted() -> bool:
    """Automatic steps and losses are wanted: this process runs under mpwatch and has not
    reported a step or a loss itself."""
    c = _channel
    return c is not None and c.state.explicit < 0


def auto_step(step: int | None, loss: object, times: dict[str, float]) -> None:
    """An automatic step (step None: a heartbeat between steps): into the buffer as report()
    would put it, unless the process reported itself; its seconds in each phase (worker.auto.split)
    go to the phases unless the script times its own."""
    c = _channel
    if c is None:
        return
    s = c.state
    if not s.phase_cache:
        ph = s.phases
        for name, secs in times.items():
            ph[name] = ph.get(name, 0.0) + secs
    if s.explicit >= 0:
        return
    s.auto = True
    if step is not None:
        s.step = step
        if step >= s.act_due:
            _at_step(c, step)
    s.buf.append((next(s.seq), time.time(), step, loss, {}))
    if s.thread is None:
        c.start()
