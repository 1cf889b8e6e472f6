"""mpwatch: supervise and watch multi-process PyTorch training.

This module is the worker-side public API. It imports only the standard library, so
`import mpwatch` in a training script costs nothing noticeable and never pulls in the
supervisor, the TUI, or torch:

    import mpwatch
    for step, batch in enumerate(loader):
        with mpwatch.phase("data"): ...
        mpwatch.report(step=step, loss=loss)

Outside mpwatch both calls are no-ops.
"""
from mpwatch.worker import active, phase, report

__all__ = ["active", "phase", "report"]
__version__ = "0.1.0"
