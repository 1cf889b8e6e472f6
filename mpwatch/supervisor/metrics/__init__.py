"""Prometheus metrics of the run (`--metrics-port`): the collector and its HTTP server. This
module alone is imported by the supervisor; prometheus_client loads only when a port is given
(a supervisor's start-up stays as cheap as it was). `serve` runs on the main thread, at set-up."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mpwatch.rundir.registry import RunError

if TYPE_CHECKING:
    from mpwatch.contract import Status
    from mpwatch.supervisor.metrics.server import MetricsServer


def serve(addr: str, port: int | None, status: Callable[[], Status],
          ticked: Callable[[], float]) -> MetricsServer | None:
    """The metrics server, serving (None without a port); RunError when it cannot bind."""
    if port is None:
        return None
    try:
        from mpwatch.supervisor.metrics.server import MetricsServer
    except ImportError:
        raise RunError("--metrics-port needs prometheus_client (pip install 'mpwatch[metrics]')") from None
    server = MetricsServer(addr, port, status, ticked)
    try:
        server.start()
    except OSError as exc:
        raise RunError(f"cannot serve metrics on {server.where}: {exc.strerror or exc}") from None
    return server
