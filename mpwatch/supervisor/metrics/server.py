"""`--metrics-port`: an HTTP server for Prometheus on this node (127.0.0.1 unless --metrics-addr
says otherwise): `/metrics` (and `/`) the run's metrics (supervisor.metrics.collector, built
at each scrape) in Prometheus' text format, or OpenMetrics through prometheus_client when the
scraper asks for it; `/healthz` 200 while the supervisor's main loop ticks, 503 once it has not
for STALE_S. Loaded only when the flag is given: prometheus_client is imported here alone.

Threads: `start()` binds on the caller's (the main thread's, at set-up: a port in use is the
user's error then), then one daemon thread serves, a thread per request; `close()` ends it.

Bounded: at most MAX_CONNECTIONS requests at a time (one more is answered 503 and closed at
once, never given a thread), and a peer silent for READ_TIMEOUT_S (a request left half-sent,
a reply never read) is cut off: idle connections cannot pile up threads. A page that fails
to build is a bug: its traceback goes to supervisor.log, the scraper gets a one-line 500.
"""
from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from mpwatch.contract import Status
from mpwatch.supervisor import boundary
from mpwatch.supervisor.metrics import collector

STALE_S = 10.0  # the main loop ticks every 0.1 s; a command may hold it a few seconds
MAX_CONNECTIONS = 16  # requests served at once (Prometheus scrapes one at a time)
READ_TIMEOUT_S = 10.0  # a peer that sends or reads nothing this long is cut off
BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
        b"mpwatch: too many connections to the metrics port\n")
CPU_HEADER = "X-Mpwatch-Cpu-Seconds"  # what building the page cost (the bench reads it)
Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class _Quiet(WSGIRequestHandler):
    timeout = READ_TIMEOUT_S  # socketserver sets it on the connection: each read and write is bounded

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not news: nothing goes to the supervisor's output."""


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per request, at most MAX_CONNECTIONS of them."""

    daemon_threads = True
    block_on_close = False  # close() never waits on a peer's connection

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.turned_away = 0  # connections answered 503 at once (the accept thread's count)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.turned_away += 1
            try:
                request.setblocking(False)  # a peer that reads nothing never holds the accept thread
                request.send(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: its slot is free again
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def _family(host: str) -> socket.AddressFamily:
    """IPv6 for an IPv6 address (`::1`), else IPv4."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return socket.AF_INET
    return infos[0][0] if infos else socket.AF_INET


class MetricsServer:
    def __init__(self, addr: str, port: int, status: Callable[[], Status], ticked: Callable[[], float]):
        """status: the snapshot builder; ticked: when the main loop last ticked (monotonic)."""
        self.addr = addr
        self.port = port
        self.ticked = ticked
        self.status = status
        self.host = socket.gethostname()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector.RunCollector(status, self.host))
        self._openmetrics = make_wsgi_app(self.registry)
        self._httpd: WSGIServer | None = None

    @property
    def where(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"{host}:{self.port}"

    def start(self) -> None:
        """Bind and serve; OSError (a port in use, an address not here) when it cannot bind."""
        server_class = type("MetricsHTTP", (_Server,), {"address_family": _family(self.addr)})
        self._httpd = make_server(self.addr, self.port, self._app, server_class=server_class,
                                  handler_class=_Quiet)
        self.port = self._httpd.server_port  # port 0: the one the system gave
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                         name="mpwatch-metrics", daemon=True).start()

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def _app(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        try:
            return self._page(environ, start_response)
        except Exception as exc:  # noqa: BLE001 - a page that fails is a bug, said where bugs are
            line = boundary.failed("metrics", exc, "metrics page")
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())
            return [line.encode("utf-8", "backslashreplace") + b"\n"]

    def _page(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            age = time.monotonic() - self.ticked()
            ok = age < STALE_S
            body = b"ok\n" if ok else f"the supervisor's loop has not ticked for {age:.0f}s\n".encode()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [body]
        if path in ("/", "/metrics"):
            if "openmetrics" in environ.get("HTTP_ACCEPT", ""):
                return list(self._openmetrics(environ, start_response))  # built here, inside _app's guard
            cpu = time.thread_time()
            body = collector.text(collector.families(self.status(), self.host))
            took = f"{time.thread_time() - cpu:.6f}"  # this thread's CPU for the status, families and text
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4),
                                      ("Content-Length", str(len(body))), (CPU_HEADER, took)])
            return [body]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"mpwatch serves /metrics and /healthz\n"]
