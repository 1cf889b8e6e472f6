"""The run as Prometheus metrics: a prometheus_client Collector that builds every family from
one status (contract.status's Status) at the moment of a scrape, so a run nobody scrapes pays
nothing. Names follow Prometheus' naming guide (base units, `_total` for counters, ratios 0-1);
labels join DCGM exporter's (`gpu`, `UUID`) and the run's (`run_id`, `rank`: the global rank,
`node`: the node rank). A value the status does not know (None) is no sample, never a zero.

Runs on the metrics server's request threads (supervisor.metrics.server); `status` is the
snapshot builder (it takes the run's lock and copies).
"""
from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from mpwatch import __version__
from mpwatch.contract.status import ALERT_KINDS, State, Status, WorkerStatus

WORKER = ["run_id", "node", "rank", "gpu", "UUID"]
GPU = ["run_id", "node", "gpu", "UUID"]
STATES = [s.value for s in State]

Family = GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily
# (name, help, the WorkerStatus value) of the per-worker gauges
WORKER_GAUGES: list[tuple[str, str, Callable[[WorkerStatus], float | int | None]]] = [
    ("mpwatch_worker_step", "The last step the worker reported.", lambda w: w["step"]),
    ("mpwatch_worker_loss", "The last loss the worker reported.", lambda w: w["loss"]),
    ("mpwatch_worker_steps_per_second", "Steps per second over the worker's last reports.",
     lambda w: w["steps_per_s"]),
    ("mpwatch_worker_heartbeat_age_seconds", "Seconds since the worker's last report.", lambda w: w["heartbeat_age"]),
    ("mpwatch_worker_gpu_memory_bytes", "GPU memory the worker's processes hold on its own GPU (NVML).",
     lambda w: None if w["gpu"] is None else w["gpu"]["mem_bytes"]),
]


class RunCollector(Collector):
    def __init__(self, status: Callable[[], Status], host: str | None = None):
        self.status = status
        self.host = host or socket.gethostname()

    def describe(self) -> list[Family]:
        return []  # nothing at registration: the families are built at each scrape

    def collect(self) -> Iterator[Family]:
        st = self.status()
        run = st["run"]
        node_info = run.get("node")
        node = str(node_info["node_rank"]) if node_info else "0"
        run_id = run["id"]
        info = InfoMetricFamily("mpwatch_run", "The run this supervisor watches (one per node).")
        info.add_metric(["run_id", "node"], {
            "run_id": run_id, "node": node, "host": self.host, "script": run["script"], "state": run["state"],
            "world_size": str(run["world_size"]), "version": __version__,
            "stop_signal": run["options"].get("stop_signal", "SIGTERM")})
        yield info
        yield from _workers(st["workers"], run_id, node)
        yield from _gpus(st, run_id, node)
        yield _alerts(st, run_id, node)


def _worker_labels(w: WorkerStatus, run_id: str, node: str) -> list[str]:
    gpu = w["gpu"]
    index = "" if gpu is None or gpu["index"] is None else str(gpu["index"])
    uuid = "" if gpu is None or gpu["uuid"] is None else gpu["uuid"]
    return [run_id, node, str(w.get("global_rank", w["rank"])), index, uuid]


def _workers(workers: list[WorkerStatus], run_id: str, node: str) -> Iterator[Family]:
    labels = [_worker_labels(w, run_id, node) for w in workers]
    for name, text, value in WORKER_GAUGES:
        fam = GaugeMetricFamily(name, text, labels=WORKER)
        for w, lab in zip(workers, labels, strict=True):
            v = value(w)
            if v is not None:
                fam.samples.append(Sample(name, dict(zip(WORKER, lab, strict=True)), float(v)))
        yield fam
    restarts = CounterMetricFamily("mpwatch_worker_restarts", "Times the worker was started again.", labels=WORKER)
    state = GaugeMetricFamily("mpwatch_worker_state", "1 for the worker's state now, 0 for the others.",
                              labels=[*WORKER, "state"])
    for w, lab in zip(workers, labels, strict=True):
        restarts.add_metric(lab, w["restarts"])
        for s in STATES:
            state.add_metric([*lab, s], 1.0 if w["state"] == s else 0.0)
    yield restarts
    yield state


def _gpus(st: Status, run_id: str, node: str) -> Iterator[Family]:
    used = GaugeMetricFamily("mpwatch_gpu_memory_used_bytes", "GPU memory in use (NVML).", labels=GPU)
    total = GaugeMetricFamily("mpwatch_gpu_memory_total_bytes", "GPU memory in all (NVML).", labels=GPU)
    util = GaugeMetricFamily("mpwatch_gpu_utilization_ratio", "Share of time the GPU was busy, 0 to 1 (NVML).",
                             labels=GPU)
    for g in st["gpus"]:
        lab = [run_id, node, str(g.get("node_index", g["index"])), g.get("uuid") or ""]
        if g["mem_used"] is not None:
            used.add_metric(lab, g["mem_used"])
        if g["mem_total"] is not None:
            total.add_metric(lab, g["mem_total"])
        if g["util_gpu"] is not None:
            util.add_metric(lab, g["util_gpu"] / 100.0)
    yield from (used, total, util)


def _alerts(st: Status, run_id: str, node: str) -> Family:
    """Alerts the status lists now: the GPUs' (while they last) and the run's (disk, hang,
    unkillable: the recent ones), by kind; every GPU kind is there, at 0 when none."""
    counts = dict.fromkeys(sorted(ALERT_KINDS), 0)
    for g in st["gpus"]:
        for a in g["alerts"]:
            counts[a["kind"]] = counts.get(a["kind"], 0) + 1
    for ra in st["alerts"]:
        counts[ra["kind"]] = counts.get(ra["kind"], 0) + 1
    fam = GaugeMetricFamily("mpwatch_alerts", "Alerts the run's status lists now, by kind.",
                            labels=["run_id", "node", "kind"])
    for kind, n in counts.items():
        fam.add_metric([run_id, node, kind], n)
    return fam
