"""The sender thread: it says hello, ships a batch of the buffered reports every flush interval,
reads the supervisor's requests, and flushes what is left at the process's exit.

`report()` only appends to a bounded deque (worker.channel's ProcessState); this daemon thread
ships batches to the supervisor every `flush_s` (0.25 s; longer in wide runs, as the supervisor
sets). The training loop therefore never waits on the supervisor: if it is slow or gone, the
deque drops its oldest entries and the gaps in the sequence numbers tell the supervisor how many
were dropped. Each batch's reports are bounded and coerced here, on the sender thread
(worker.bounds: a 1 MB metric is cut, 10**400 goes as a float), so that no report costs the batch
it travels in; worker.batch shapes the batch. Its imports are made under the channel's `imports`
lock, which a fork waits for (worker.channel). Standard library only.
"""
from __future__ import annotations

import os
import time

from mpwatch.contract import protocol
from mpwatch.worker.channel import drain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mpwatch.contract import OomRecord
    from mpwatch.worker.channel import Channel

RETRY_S = 1.0  # the supervisor is gone or restarting: connect again after this
REFUSED_RETRY_S = 5.0  # it refused us (a wrong key): try again, less often
EXIT_JOIN_S = 1.0  # at exit, the thread's last flush gets this long: exit must not hang
FIRST_S = 0.02  # a first report waits at most this long to be sent...
FIRST_FOR_S = 10.0  # ...in a process's first seconds (one that never reports stops looking)


class Sender:
    """One process's sender: runs on its thread (`run`), and at exit on the exiting one."""

    def __init__(self, chan: Channel):
        self.chan = chan

    def run(self) -> None:
        chan = self.chan
        s = chan.state
        if s.conn is None:
            self._connect()  # hello now: the supervisor learns this process speaks the protocol
        flush_s = chan.config.flush_s
        now = time.monotonic()
        due, hurry_until = now + flush_s, now + FIRST_FOR_S
        while True:
            # Until its first report has gone (for FIRST_FOR_S at most), one waits FIRST_S, not a
            # flush interval: a started or restarted worker shows at once. Nothing else hurries.
            hurry = s.last_sent_seq < 0 and now < hurry_until
            if s.stop.wait(max(0.0, min(due - now, FIRST_S) if hurry else due - now)):
                return
            now = time.monotonic()
            if now >= due or (hurry and s.buf):
                self.flush()
                due = now + flush_s

    def _connect(self) -> bool:
        chan = self.chan
        s, cfg = chan.state, chan.config
        now = time.monotonic()
        if now < s.retry_at:
            return False
        with s.imports:
            # Client's handshake imports hmac inside itself: a fork in that import left the child
            # a half-made hmac, and every connection of its failed. Imported here, where forks wait.
            import hmac  # noqa: F401 - for the handshake
            from multiprocessing.connection import Client

        try:
            s.conn = conn = Client(cfg.address, family="AF_UNIX", authkey=cfg.authkey)
            hello: dict[str, object] = {"t": protocol.HELLO, "v": protocol.VERSION, "rank": cfg.rank,
                                        "pid": os.getpid(), "ppid": os.getppid()}
            if chan.quiet:
                hello["quiet"] = True
            conn.send_bytes(protocol.encode(hello))
            return True
        except (OSError, EOFError, ValueError):
            s.conn = None
            s.retry_at = now + RETRY_S
            return False
        except Exception:  # noqa: BLE001 - AuthenticationError and friends: never raise into training
            s.conn = None
            s.retry_at = now + REFUSED_RETRY_S
            return False

    def flush(self) -> None:
        chan = self.chan
        s = chan.state
        buf = s.buf
        if s.conn is not None:
            self._read_requests()
        ctl = chan.control
        answers = ctl.take() if ctl is not None else None
        ooms = drain(s.ooms, protocol.OOM_MAX)  # worker.cuda_memory queues them on another thread
        if not buf and s.phases == s.last_phases and not answers and not ooms:
            return
        if s.conn is None and not self._connect():
            self._give_back(answers, ooms)
            return
        conn = s.conn
        assert conn is not None  # _connect() succeeded
        with s.imports:
            from mpwatch.worker import batch  # each report bounded there, never in report()

        items = batch.drain(buf)
        dropped = 0
        if items:
            # The deque only ever drops its oldest entries, so every gap in the sequence
            # numbers, whether before items[0] or between items, adds up to this.
            dropped = items[-1][0] - s.last_sent_seq - len(items)
            s.last_sent_seq = items[-1][0]
        own = dict(s.phases)  # the training thread's totals, to tell whether they moved (above)
        phases = batch.with_gpu_times(s, items, own)
        msg = batch.frame(chan, items, dropped, phases, answers, ooms)
        try:
            conn.send_bytes(protocol.encode_lossy(msg))
            s.last_phases = own
        except (OSError, EOFError, ValueError):
            self._give_back(answers, ooms)
            self._lost()

    def _give_back(self, answers: list[list[object]] | None, ooms: list[OomRecord]) -> None:
        """A batch that could not be sent: its answers and OOM records go with the next one."""
        ctl = self.chan.control
        if answers and ctl is not None:
            ctl.give_back(answers)
        self.chan.state.ooms.extendleft(reversed(ooms))

    def _lost(self) -> None:
        s = self.chan.state
        try:
            if s.conn is not None:
                s.conn.close()
        except OSError:
            pass
        s.conn = None
        s.retry_at = time.monotonic() + RETRY_S

    def _read_requests(self) -> None:
        """The supervisor's requests (protocol 2), read without waiting, for worker.control."""
        s = self.chan.state
        conn = s.conn
        try:
            while conn is not None and conn.poll(0):
                msg = protocol.decode(conn.recv_bytes(protocol.MAX_FRAME))
                with s.imports:
                    from mpwatch.worker.control_state import attach  # stdlib; loaded by the first request

                attach(self.chan).receive(msg)
        except protocol.BadFrame:
            pass  # the supervisor's own frame: never expected, never worth ending training for
        except (OSError, EOFError, ValueError):
            self._lost()

    def close(self) -> None:
        """Flush what is left at normal interpreter exit, briefly: exit must not hang."""
        s = self.chan.state
        if s.pid != os.getpid():
            return
        s.stop.set()
        if s.thread is not None:
            s.thread.join(timeout=EXIT_JOIN_S)
            if s.thread.is_alive():
                return  # stuck sending to a supervisor that does not read: do not hang exit
            self.flush()
        if s.conn is not None:
            try:
                s.conn.send_bytes(protocol.encode({"t": protocol.BYE}))
                s.conn.close()
            except (OSError, EOFError, ValueError):
                pass
