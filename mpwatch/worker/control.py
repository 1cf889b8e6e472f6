"""Control from the training loop: "checkpoint now" and values changed while it runs.

    import mpwatch
    for step, batch in enumerate(loader):
        lr = mpwatch.tunable("lr", 0.1)        # `mpwatch ctl set lr 0.01`, or `t` in the TUI
        ...
        mpwatch.report(step=step, loss=loss)
        if mpwatch.should_checkpoint():       # `mpwatch ctl checkpoint all`, or `c` in the TUI
            save(model, step)

Both are meant for every step: while no request is due they cost one compare. On a run of
several ranks a request takes effect at the same step on every rank (the supervisor picks
the step; see supervisor.live). Outside mpwatch, should_checkpoint() is False and tunable()
returns its default. Runs on the training thread. Stdlib only; loaded on first use by
`mpwatch.should_checkpoint`.
"""
from __future__ import annotations

from mpwatch.worker import api as _api
from mpwatch.worker import control_state as _state

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` costs milliseconds at start-up: for the checker only
    from collections.abc import Callable
    from typing import Protocol, TypeVar

    from mpwatch.worker.channel import Channel

    V = TypeVar("V", int, float, str, bool)

    class Tunable(Protocol):
        def __call__(self, name: str, default: V) -> V: ...

__all__ = ["should_checkpoint", "tunable"]


def _outside_should_checkpoint() -> bool:
    return False


def _outside_tunable(name: str, default: V) -> V:
    return default


def _make(chan: Channel) -> tuple[Callable[[], bool], Tunable]:
    ctl = _state.attach(chan)
    declare = ctl.declare

    def should_checkpoint() -> bool:
        """True once per checkpoint request, at the step the supervisor chose for it."""
        return ctl.ck_due <= chan.state.step and ctl.run_due(True)

    def tunable(name: str, default: V) -> V:
        """The tunable's value now: `default` until `mpwatch ctl set NAME VALUE` (or `t` in
        the TUI) changes it; always of the default's type (int, float, str or bool)."""
        if ctl.due <= chan.state.step:
            ctl.run_due(False)
        try:
            return ctl.values[name]  # type: ignore[return-value]  # declared with the default's type
        except KeyError:
            return declare(name, default)  # type: ignore[return-value]

    return should_checkpoint, tunable


should_checkpoint: Callable[[], bool]
tunable: Tunable
if _api._channel is None:
    should_checkpoint, tunable = _outside_should_checkpoint, _outside_tunable
else:
    should_checkpoint, tunable = _make(_api._channel)
