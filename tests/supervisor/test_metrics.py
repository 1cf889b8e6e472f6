"""Issue 23, metrics out: `--metrics-port` serves Prometheus text that prometheus_client's own
parser reads, with the names and labels the issue fixes (a real scrape of a real run on the
stand-in NVML), `/healthz`, loopback only unless --metrics-addr says otherwise, one line when
the port is taken, and prometheus_client never loaded without the flag. The Grafana dashboard
that ships with mpwatch queries only metrics a real scrape has."""
import json
import os
import re
import socket
import urllib.error
import urllib.request

import psutil
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from mpwatch.supervisor.metrics.server import MetricsServer
from tests.helpers import FIXTURES, ROOT, mpwatch, one_line_error, wait_for
from tests.libnvml import nvml_env

GiB = 1 << 30
DASHBOARD = ROOT / "contrib" / "grafana" / "mpwatch.json"
ISSUE_NAMES = {"mpwatch_worker_step", "mpwatch_worker_loss", "mpwatch_worker_steps_per_second",
               "mpwatch_worker_heartbeat_age_seconds", "mpwatch_worker_state", "mpwatch_worker_restarts_total",
               "mpwatch_worker_gpu_memory_bytes", "mpwatch_gpu_memory_used_bytes", "mpwatch_gpu_memory_total_bytes",
               "mpwatch_gpu_utilization_ratio", "mpwatch_alerts", "mpwatch_run_info"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 10, accept: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text: str) -> dict[str, list]:
    """Sample name -> its samples, as prometheus_client's parser reads the page."""
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def listening(pid: int, port: int) -> list[str]:
    return [c.laddr.ip for c in psutil.Process(pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


def gpu_env(libnvml, tmp_path) -> dict:
    env = nvml_env(libnvml, tmp_path, {
        "gpus": [{"name": "Fake A", "mem_total": 80 * GiB, "uuid": "GPU-aaaa"},
                 {"name": "Fake B", "mem_total": 40 * GiB, "uuid": "GPU-bbbb"}],
        "frames": [{"gpus": [{"util_gpu": 60, "processes": [{"pid": "rank:0", "mem": 8 * GiB}]},
                             {"util_gpu": 93, "processes": [{"pid": "rank:1", "mem": 4 * GiB}]}]}]},
        base=dict(os.environ))
    return env


def test_a_real_scrape_parses_and_holds_every_metric_with_the_run_and_dcgm_labels(headless, tmp_path, libnvml):
    port = free_port()
    run = headless(FIXTURES / "control_loop.py", "0", "0.05", n=2, opts=["--metrics-port", port, "--gpu-interval", "0.2"],
                   env=dict(gpu_env(libnvml, tmp_path), PYTHONPROFILEIMPORTTIME="1"))  # it tells its imports

    def ready():
        st = run.status()
        ok = all(w["step"] and w["steps_per_s"] and w["gpu"] and w["gpu"]["mem_bytes"] for w in st["workers"]) \
            and len(st["gpus"]) == 2
        return st if ok else None
    st = wait_for(ready, timeout=90, what="reports and GPUs placed")
    assert st["run"]["options"]["metrics"] == f"127.0.0.1:{port}"
    code, text = get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200
    got = samples(text)
    assert set(got) >= ISSUE_NAMES, ISSUE_NAMES - set(got)
    run_id = st["run"]["id"]
    info = got["mpwatch_run_info"][0].labels
    assert info["run_id"] == run_id and info["node"] == "0" and info["stop_signal"] == "SIGTERM"
    steps = {s.labels["rank"]: s for s in got["mpwatch_worker_step"]}
    assert set(steps) == {"0", "1"}
    for w in st["workers"]:
        lab = steps[str(w["rank"])].labels
        assert (lab["run_id"], lab["node"], lab["gpu"], lab["UUID"]) == (run_id, "0", str(w["gpu"]["index"]),
                                                                        w["gpu"]["uuid"])
    assert {s.labels["rank"]: s.value for s in got["mpwatch_worker_gpu_memory_bytes"]} == {"0": 8 * GiB, "1": 4 * GiB}
    states = [s for s in got["mpwatch_worker_state"] if s.labels["rank"] == "0"]
    assert sum(s.value for s in states) == 1 and next(s for s in states if s.value).labels["state"] == "running"
    assert {s.labels["UUID"]: s.value for s in got["mpwatch_gpu_memory_total_bytes"]} == {"GPU-aaaa": 80 * GiB,
                                                                                          "GPU-bbbb": 40 * GiB}
    assert {s.labels["gpu"]: s.value for s in got["mpwatch_gpu_utilization_ratio"]} == {"0": 0.6, "1": 0.93}
    assert all(s.value == 0 for s in got["mpwatch_worker_restarts_total"])
    assert {s.labels["kind"] for s in got["mpwatch_alerts"]} >= {"contention", "oom", "idle"}
    code, om = get(f"http://127.0.0.1:{port}/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert code == 200 and om.endswith("# EOF\n")  # prometheus_client's own OpenMetrics, when asked for
    fams = {f.name: f for f in openmetrics_families(om)}
    assert {s.labels["rank"] for s in fams["mpwatch_worker_restarts"].samples} == {"0", "1"}
    assert fams["mpwatch_worker_restarts"].type == "counter" and fams["mpwatch_run_info"].type == "gauge"
    assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
    assert get(f"http://127.0.0.1:{port}/other")[0] == 404
    assert listening(run.proc.pid, port) == ["127.0.0.1"]  # loopback only, by default
    assert "prometheus_client" in imported(run.stderr_text)  # with the flag, loaded (below: only then)
    wanted = set(re.findall(r"\bmpwatch_[a-z_]+", " ".join(
        t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", []))))
    assert wanted and wanted <= set(got) | {"mpwatch_run_info"}, wanted - set(got)


def test_the_port_comes_from_the_setting_too_and_listens_where_metrics_addr_says(headless, tmp_path):
    port = free_port()
    env = dict(os.environ, MPWATCH_METRICS_PORT=str(port))
    run = headless(FIXTURES / "control_loop.py", "0", "0.05", n=1, opts=["--metrics-addr", "0.0.0.0"], env=env)
    wait_for(lambda: listening(run.proc.pid, port), what="the metrics port")
    assert listening(run.proc.pid, port) == ["0.0.0.0"]
    wait_for(lambda: run.worker(0)["step"], what="a report")
    assert samples(get(f"http://127.0.0.1:{port}/metrics")[1])["mpwatch_worker_step"][0].value >= 0


def test_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = mpwatch("--headless", "--metrics-port", port, "--run-dir", tmp_path / "run", FIXTURES / "ticker.py",
                      cwd=tmp_path)
    one_line_error(res, f"cannot serve metrics on 127.0.0.1:{port}: Address already in use")


def test_healthz_says_503_once_the_loop_stops_ticking():
    now = [0.0]
    server = MetricsServer("127.0.0.1", free_port(), status=lambda: {}, ticked=lambda: now[0])
    server.start()
    try:
        import time
        now[0] = time.monotonic()
        assert get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
        now[0] = time.monotonic() - 60
        code, text = get(f"http://127.0.0.1:{server.port}/healthz")
        assert code == 503 and "has not ticked for 60s" in text
    finally:
        server.close()


def imported(stderr: str) -> set[str]:
    """The modules a process imported, as PYTHONPROFILEIMPORTTIME=1 made it say on its stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_supervisor_without_the_flag_never_loads_prometheus_client(headless):
    """A real run to its end, its supervisor telling every import (python's own import log)."""
    run = headless(FIXTURES / "reporter.py", "5", n=1, env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
    assert run.wait_exit(60) == 0
    mods = imported(run.stderr_text)
    assert {"mpwatch.supervisor.core", "mpwatch.supervisor.metrics"} <= mods, sorted(mods)[:20]  # it does tell
    assert not {m for m in mods if m.split(".")[0] == "prometheus_client"}, "loaded without --metrics-port"


def test_each_node_of_a_multi_node_run_labels_its_own_ranks_globally():
    """The `nodes` recording: two real supervisors of one run (tests/record_nodes.py); each
    serves its own, labelled with its node rank and its workers' global ranks."""
    from mpwatch.supervisor.metrics import collector
    from tests.tui.recorded import recording

    for node, st in enumerate(recording("nodes")["node_statuses"]):
        got = samples(collector.text(collector.families(st, "host")).decode())
        ranks = {s.labels["rank"] for s in got["mpwatch_worker_step"]}
        assert ranks == {str(r) for r in range(4 * node, 4 * node + 4)}
        assert {s.labels["node"] for fam in got.values() for s in fam} == {str(node)}
        assert got["mpwatch_run_info"][0].labels["world_size"] == "8"
