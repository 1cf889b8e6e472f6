"""The metrics port against odd names and idle peers (issue 30, items 2 and 7), on real runs:

- a script whose name holds a byte that is no UTF-8 (`x\\xffx.py`, from a non-UTF-8 argv) is
  scraped in both formats (Prometheus text, OpenMetrics) with 200, and prometheus_client's own
  parsers read its label as `x\\xffx.py` (the byte written out), with nothing logged as a bug;
- 200 connections that send half a request and then nothing hold at most MAX_CONNECTIONS
  threads of the supervisor, are cut off after READ_TIMEOUT_S, and a scrape works after."""
from __future__ import annotations

import os
import socket
import time

import psutil
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from tests.documented import METRICS_CONNECTIONS, METRICS_SILENT_S
from tests.faults.conftest import FAULTS, reporting
from tests.helpers import wait_for
from tests.supervisor.test_metrics import free_port, get, listening, samples

pytestmark = pytest.mark.timeout(240)
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def test_a_script_named_with_a_byte_that_is_no_utf8_is_scraped_in_both_formats(headless, tmp_path):
    script = tmp_path / os.fsdecode(b"x\xffx.py")  # a lone surrogate in Python, the byte on disk
    script.write_bytes((FAULTS / "steady.py").read_bytes())
    port = free_port()
    run = headless(script, n=1, opts=["--metrics-port", port])
    wait_for(lambda: reporting(run, 1), 60, what="rank 0 reporting")
    code, text = get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200, text
    info = samples(text)["mpwatch_run_info"][0].labels
    assert info["script"].endswith("/x\\xffx.py"), info
    assert samples(text)["mpwatch_worker_step"][0].value >= 1
    code, om = get(f"http://127.0.0.1:{port}/metrics", accept=OPENMETRICS)
    assert code == 200 and om.endswith("# EOF\n"), om
    fams = {f.name: f for f in openmetrics_families(om)}
    assert fams["mpwatch_run_info"].samples[0].labels["script"] == info["script"]
    assert "Traceback" not in run.stderr_text  # and the strict fixture finds no bug in supervisor.log


def _half_requests(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line that ends it
        out.append(s)
    return out


def _closed_by_server(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        while True:
            if not s.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_connections_to_the_metrics_port_are_capped_and_cut_off(headless):
    port = free_port()
    run = headless(FAULTS / "steady.py", n=1, opts=["--metrics-port", port])
    wait_for(lambda: reporting(run, 1) and listening(run.proc.pid, port), 60, what="reports, the port")
    sup = psutil.Process(run.proc.pid)
    base = sup.num_threads()
    idle = _half_requests(port, 200)
    try:
        most = base
        deadline = time.monotonic() + 3  # the threads a flood gets show within moments
        while time.monotonic() < deadline:
            most = max(most, sup.num_threads())
            time.sleep(0.05)
        assert most <= base + METRICS_CONNECTIONS + 2, (most, base)
        assert run.status()["workers"][0]["state"] == "running"  # the run answers meanwhile
        wait_for(lambda: all(_closed_by_server(s) for s in idle), METRICS_SILENT_S + 30,
                 what="every idle connection cut off by the metrics server")
        wait_for(lambda: sup.num_threads() <= base + 1, 30, what=f"request threads to end ({base} before)")
    finally:
        for s in idle:
            s.close()
    code, text = get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200 and samples(text)["mpwatch_worker_step"]
