"""The worker side of control: what the supervisor's requests set for
`should_checkpoint()` and `tunable()`, and the answers that go back.

Two threads share a `ControlState` without a lock:
- the sender thread (worker.sender) hands each request frame to `receive()`, which appends
  it to `inbox` and then lowers `due` and `ck_due`; at each flush it `take()`s the outbox;
- the training thread calls should_checkpoint() and tunable(): while nothing is due, one
  compare of `due` with this process's current step (worker.channel's `ProcessState.step`, the
  last step reported, by report() or by the automatic steps) and nothing else. When the step
  reaches `due`, `run_due()` drains the inbox, applies what is due, and queues the answers.

What "at step S" means, in the script's own numbering: a checkpoint at S is due once step S is
reported (`report(step=S)`, then should_checkpoint() is True: the state saved is step S's); a
value set from step S is what tunable() returns for step S, so it is due once step S-1 is
reported (a loop reads its tunables before the step they serve, at the top of the loop or
after the last report), and its answer says S, the first step that uses it.
A deque's append and popleft are atomic, and an attribute store is one, so the only order that
matters is the sender's: item first, `due` after (see run_due for the other side).

The actions a process runs at a step boundary (a profile: protocol.STEP_ACTIONS) come the
same way and wait in worker.actions' StepActions: the sender lowers the process's `act_due`
after the item, and the training thread's next step boundary (report() with a step, an automatic
step) calls `at_step`. Their answers go back in the same outbox.

A declaration the supervisor cannot keep is said on the rank's stderr where it happens, once:
a float tunable whose default is not finite (the script gets its default; the supervisor
refuses it alone and lists it in the rank's status, keeping the others), and the first name
past DECLARED_MAX (it and the later ones keep their defaults, unseen by the supervisor).

Stdlib only, and cheap to import: `import mpwatch` does not load it (mpwatch.__getattr__).
"""
from __future__ import annotations

import math
import os
import sys
from collections import deque

from mpwatch.contract import protocol
from mpwatch.worker.actions import StepActions
from mpwatch.worker.channel import drain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mpwatch.worker.channel import Channel

    # step (None: now), id, tunable name (None: checkpoint), value
    Item = tuple[int | None, int, str | None, object]

NEVER = 1 << 62  # `due` when nothing is pending (worker.channel's act_due is the same)
NOW = -(1 << 62)  # `due` when the slow path must run at the next call
SEEN_MAX = 4096  # request ids remembered (a request resent after a reconnect is applied once)
DECLARED_MAX = 256  # tunables the supervisor is told of (it keeps as many); more still work here
TAKE_MAX = 1024  # outbox entries a batch carries (the rest go with the next): frames stay small
_MISSING = object()
NO_TORCH = "this process has not imported torch"


def coerce(value: object, kind: type) -> object:
    """`value` as a tunable of type `kind`, or _MISSING when it is not one (the supervisor
    checks every value it sends; this is the worker's own guard). An int is a float's value."""
    t = type(value)
    if t is kind:
        return value
    if kind is float and t is int:
        return float(value)  # type: ignore[arg-type]  # an int, checked above
    return _MISSING


def check_declaration(name: object, default: object) -> type:
    """The tunable's type; TypeError or ValueError for a call that can never work."""
    kind = type(default)
    if kind not in (int, float, str, bool):
        raise TypeError(f"mpwatch.tunable({name!r}, ...): the default must be an int, float, str or bool, "
                        f"not {kind.__name__}")
    if type(name) is not str or not 0 < len(name) <= protocol.TUNABLE_NAME_MAX or not name.isprintable():
        raise ValueError(f"mpwatch.tunable(): a name is 1 to {protocol.TUNABLE_NAME_MAX} printable "
                         f"characters, got {name!r}")
    return kind


class ControlState:
    """This process's control state (one per process; a forked child starts its own)."""

    def __init__(self, chan: Channel, values: dict[str, object]):
        self.chan = chan
        self.due = NOW  # tunable(): run_due() when the process's step >= due
        self.ck_due = NOW  # should_checkpoint(): the same, and NOW while a checkpoint waits to be returned
        self.inbox: deque[Item] = deque()  # sender -> training thread
        self.outbox: deque[list[object]] = deque()  # training -> sender thread: BATCH `live` entries
        self.pending: list[Item] = []  # training thread: received, not due yet
        self.ready: list[Item] = []  # training thread: checkpoint requests due, not yet returned True
        self.values: dict[str, object] = {}  # declared tunable -> its value now
        self.early: dict[str, object] = dict(values)  # values of names not declared yet (start-up, or a set)
        self.polls = False  # should_checkpoint() was called (the supervisor is told once)
        self.started = False  # the sender thread was asked to start
        self.seen: set[int] = set()  # sender thread: request ids received
        self.acts = StepActions(self)  # training thread: the actions run at step boundaries
        self.acts_in: deque[tuple[int | None, int, str, dict[str, object]]] = deque()  # sender -> training
        self.declared = 0  # declarations sent to the supervisor (at most DECLARED_MAX)
        self.capped = False  # the first name past DECLARED_MAX was said on stderr

    @property
    def rank(self) -> int:
        return self.chan.config.rank

    # ------------------------------------------------------------ sender thread ----
    def receive(self, msg: dict[str, object]) -> bool:
        """One request frame from the supervisor; False when it is not one this side reads."""
        t, rid, step = msg.get("t"), msg.get("id"), msg.get("step")
        if type(rid) is not int or (step is not None and type(step) is not int):
            return False
        if t in protocol.STEP_ACTIONS:
            return self._receive_action(t, rid, step, msg)
        if t == protocol.CHECKPOINT:
            item: Item = (step, rid, None, None)
        elif t == protocol.SET:
            name, value = msg.get("name"), msg.get("value")
            if type(name) is not str or type(value) not in (int, float, str, bool):
                return False
            item = (step, rid, name, value)
        else:
            return False
        if not self._new(rid):
            return True
        self.inbox.append(item)
        self.due = self.ck_due = NOW  # after the append: the training thread finds the item
        return True

    def _receive_action(self, t: str, rid: int, step: int | None, msg: dict[str, object]) -> bool:
        if not self._new(rid):
            return True
        due = step is None or self.chan.state.step >= step
        if t in protocol.TORCH_ACTIONS and due and "torch" not in sys.modules:
            # said now, not at a step boundary a process may never reach: py-spy instead, perhaps
            self.result(rid, {"state": "failed", "why": NO_TORCH, "no_torch": True})
            return True
        self.acts_in.append((step, rid, t, msg))
        self.chan.state.act_due = NOW  # after the append: the next step boundary finds it
        return True

    def _new(self, rid: int) -> bool:
        """Sender thread: the request id is seen for the first time."""
        if rid in self.seen:
            return False
        if len(self.seen) >= SEEN_MAX:
            self.seen.clear()  # ids only grow: an old one resent this late is long applied
        self.seen.add(rid)
        return True

    def take(self) -> list[list[object]]:
        """The answers and declarations for the next batch."""
        return drain(self.outbox, TAKE_MAX)

    def give_back(self, entries: list[list[object]]) -> None:
        """A batch that could not be sent: its entries go with the next one."""
        self.outbox.extendleft(reversed(entries))

    # ---------------------------------------------------------- training thread ----
    def run_due(self, checkpoint: bool) -> bool:
        """The slow path: take what the sender received, apply what is due at this step;
        with `checkpoint`, True when a checkpoint request is due (answered here, once)."""
        if not self.started:
            self.started = True
            self.chan.start()  # a script that never calls report() connects for its requests
        if checkpoint and not self.polls:
            self.polls = True
            self.outbox.append([protocol.LIVE_POLLS])
        inbox = self.inbox
        while inbox:
            try:
                self.pending.append(inbox.popleft())
            except IndexError:
                break
        step = self.chan.state.step
        keep: list[Item] = []
        for item in self.pending:
            at, is_set = item[0], item[2] is not None
            if at is not None and due_at(at, is_set) > step:
                keep.append(item)
            elif not is_set:
                self.ready.append(item)
            else:
                self._set(item, step)
        self.pending = keep
        due = min([due_at(it[0], it[2] is not None) for it in keep if it[0] is not None], default=NEVER)
        self.due = due
        self.ck_due = NOW if self.ready or not self.polls else due
        if inbox:  # the sender added one after the drain: it may have set `due` before we did
            self.due = self.ck_due = NOW
        if not (checkpoint and self.ready):
            return False
        for at, rid, _, _ in self.ready:
            self._answer(rid, at, step)
        self.ready = []
        self.ck_due = NOW if inbox else self.due
        return True

    def _set(self, item: Item, step: int) -> None:
        _, rid, name, value = item
        assert name is not None  # a set, not a checkpoint
        current = self.values.get(name, _MISSING)
        if current is _MISSING:
            self.early[name] = value  # declared later: tunable() takes it then
        else:
            v = coerce(value, type(current))
            if v is not _MISSING:
                self.values[name] = v
        self._answer(rid, item[0], step + 1 if step >= 0 else step)  # the first step that uses it

    def _answer(self, rid: int, at: int | None, step: int) -> None:
        self.answer(rid, at, step)

    # ----------------------------------------------- actions at step boundaries ----
    def at_step(self, step: int) -> None:
        """Training thread, at a step boundary once the step reached `act_due` (worker.api)."""
        box, acts = self.acts_in, self.acts
        while box:
            try:
                acts.queue(box.popleft())
            except IndexError:
                break
        acts.at_step(step)
        self.chan.state.act_due = acts.due()
        if box:  # the sender added one after the drain: it may have set act_due before we did
            self.chan.state.act_due = NOW

    def answer(self, rid: int, at: int | None, step: int) -> None:
        """Request `rid` took effect (or started) at `step`, asked for `at`. Any thread."""
        shown = step if step >= 0 else None  # -1: this process reported no step yet
        self.outbox.append([protocol.LIVE_DONE, rid, shown, at is not None and step > at])

    def result(self, rid: int, fields: dict[str, object]) -> None:
        """An action's outcome (contract.actions reads the fields). Any thread."""
        self.outbox.append([protocol.LIVE_RESULT, rid, fields])

    def declare(self, name: str, default: object) -> object:
        """tunable()'s first call for `name`: its value (a value sent before wins over the
        default when it has the default's type), and the supervisor is told."""
        kind = check_declaration(name, default)
        value = default
        early = self.early.pop(name, _MISSING)
        if early is not _MISSING:
            v = coerce(early, kind)
            value = default if v is _MISSING else v
        self.values[name] = value
        if isinstance(default, float) and not math.isfinite(default):
            _say(f"tunable({name!r}, {default!r}): a float tunable's default must be finite; the script "
                 f"gets {default!r}, and mpwatch ctl set cannot change it (the other tunables are kept)")
        if self.declared < DECLARED_MAX:
            self.declared += 1
            shown = default if kind is not str else str(default)[:protocol.TUNABLE_STR_MAX]
            self.outbox.append([protocol.LIVE_DECLARE, name, kind.__name__, shown])
        elif not self.capped:
            self.capped = True
            _say(f"tunable({name!r}, ...): past {DECLARED_MAX} tunables, this one and any declared after "
                 "it keep their defaults: the supervisor is not told of them (ctl set cannot reach them)")
        if not self.started:
            self.started = True
            self.chan.start()
        return value

    def after_fork(self) -> None:
        """In a forked child: the values stay, the requests and answers were the parent's."""
        self.due = self.ck_due = NOW
        self.inbox = deque()
        self.outbox = deque()
        self.pending, self.ready = [], []
        self.polls = self.started = False
        self.seen = set()
        self.acts.after_fork()
        self.acts_in = deque()


def due_at(at: int, is_set: bool) -> int:
    """The last step reported at which a request for step `at` is due: a checkpoint's own step,
    the step before a value's (see the module's doc)."""
    return at - 1 if is_set else at


def start_values() -> dict[str, object]:
    """The tunables' values when the supervisor started this process (protocol.ENV_TUNABLES),
    or none when the variable is missing or not what the supervisor writes."""
    raw = os.environ.get(protocol.ENV_TUNABLES)
    if not raw or len(raw) > 1 << 20:
        return {}
    import json

    try:
        got = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(got, dict):
        return {}
    return {k: v for k, v in got.items() if type(v) in (int, float, str, bool)}


def attach(chan: Channel) -> ControlState:
    """The process's ControlState, made on first use (by worker.control, or a request frame)."""
    with chan.state.lock:  # the training thread's first call and the sender's first frame may race here
        ctl = chan.control
        if not isinstance(ctl, ControlState):
            ctl = ControlState(chan, start_values())
            chan.control = ctl
            os.register_at_fork(after_in_child=ctl.after_fork)
    return ctl


def _say(text: str) -> None:
    """One line on the process's stderr (the rank's log); never an error of the script's."""
    try:
        sys.stderr.write(f"mpwatch: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # closed, or replaced by something that is no file
        pass
