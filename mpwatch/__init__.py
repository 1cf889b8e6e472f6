"""mpwatch: supervise and watch multi-process PyTorch training.

This module is the worker-side public API. It imports only the standard library, so
`import mpwatch` in a training script costs nothing noticeable and never pulls in the
supervisor, the TUI, or torch:

    import mpwatch
    for step, batch in enumerate(loader):
        with mpwatch.phase("data"): ...
        lr = mpwatch.tunable("lr", 0.1)
        mpwatch.report(step=step, loss=loss)
        if mpwatch.should_checkpoint(): ...

Outside mpwatch every call is a no-op (should_checkpoint() is False, tunable() returns its
default). should_checkpoint and tunable (mpwatch.worker.control) load on first use.
"""
from mpwatch.worker.api import active, phase, report

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mpwatch.worker.control import should_checkpoint, tunable

__all__ = ["active", "phase", "report", "should_checkpoint", "tunable"]
__version__ = "0.1.0"

_LAZY = ("should_checkpoint", "tunable")


def __getattr__(name: str) -> object:
    """mpwatch.worker.control's functions, loaded when first asked for, then plain attributes."""
    if name in _LAZY:
        from mpwatch.worker import control

        value = getattr(control, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mpwatch' has no attribute {name!r}")
