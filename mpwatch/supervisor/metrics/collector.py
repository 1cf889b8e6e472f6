"""The run as Prometheus metrics, built from one status (contract.status's Status) at the moment
of a scrape, so a run nobody scrapes pays nothing. Names follow Prometheus' naming guide (base
units, `_total` for counters, ratios 0-1); labels join DCGM exporter's (`gpu`, `UUID`: the GPU's,
and on a MIG slice `GPU_I_ID` and `GPU_I_PROFILE`, its GPU instance and profile) and the run's
(`run_id`, `rank`: the global rank, `node`: the node rank). A GPU in MIG mode is exposed slice by
slice (its whole memory would count its slices twice). A value the status does not know
(None) is no sample, never a zero.

`families()` makes plain records whose label sets are rendered once per worker (a worker's 14
samples share one); `text()` writes them in Prometheus' text format 0.0.4, as prometheus_client's
generate_latest would, at a tenth of its cost (it escapes every label of every sample again: 25 µs
a sample here, 90 ms for 256 ranks); `RunCollector` hands the same records to prometheus_client
(its registry, its OpenMetrics output). Pure but for the host name; runs on the metrics server's
request threads (supervisor.metrics.server), fed by the snapshot builder.
"""
from __future__ import annotations

import math
import socket
from collections.abc import Callable, Iterator
from typing import NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from mpwatch import __version__
from mpwatch.contract import (
    ALERT_KINDS,
    RUN_ALERT_KINDS,
    GpuView,
    MigSlice,
    State,
    Status,
    WorkerStatus,
    devices,
    leaves,
    slowdown,
)

Labels = dict[str, str]
STATES = [s.value for s in State]


class Family(NamedTuple):
    name: str  # as exposed: a counter's ends in _total
    kind: str  # gauge | counter
    help: str
    samples: list[tuple[Labels, str, float]]  # labels, the same rendered `{k="v",...}`, value


def render(labels: Labels) -> str:
    """`{k="v",...}` of labels already made writable (`_one`): the text format's escapes."""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") \
        if ("\\" in v or "\n" in v or '"' in v) else v


def label_value(v: str) -> str:
    """Any value from the run (a script's name, a host, an argument) as text every exposition
    can encode: UTF-8 as it is; a byte that was no UTF-8 (a name from a non-UTF-8 argv reaches
    Python as a lone surrogate, which no encoder takes) written as `\\xff`, any other lone
    surrogate as `\\udXXX`. Never raises: the one way a label value is made (both formats)."""
    try:
        v.encode("utf-8")
        return v
    except UnicodeEncodeError:
        return "".join(_char(c) for c in v)


def _char(c: str) -> str:
    n = ord(c)
    if 0xDC80 <= n <= 0xDCFF:  # surrogateescape's code for the byte n - 0xDC00
        return f"\\x{n - 0xDC00:02x}"
    return f"\\u{n:04x}" if 0xD800 <= n <= 0xDFFF else c


def _one(labels: Labels) -> tuple[Labels, str]:
    """Labels made writable (label_value) and rendered once; every sample's labels come here
    (or through `_plus`, which takes the same path)."""
    clean = {k: label_value(v) for k, v in labels.items()}
    return clean, render(clean)


def _plus(one: tuple[Labels, str], key: str, value: str) -> tuple[Labels, str]:
    """Labels `_one` made, with one more (a worker's state, a phase's name): made writable and
    escaped as every label is, without rendering the others again."""
    v = label_value(value)
    lab, rendered = one
    return {**lab, key: v}, f'{rendered[:-1]},{key}="{_escape(v)}"}}'


# (name, help, the WorkerStatus value) of the per-worker gauges
WORKER_GAUGES: list[tuple[str, str, Callable[[WorkerStatus], float | int | None]]] = [
    ("mpwatch_worker_step", "The last step the worker reported.", lambda w: w["step"]),
    ("mpwatch_worker_loss", "The last loss the worker reported.", lambda w: w["loss"]),
    ("mpwatch_worker_steps_per_second", "Steps per second over the worker's last reports.",
     lambda w: w["steps_per_s"]),
    ("mpwatch_worker_heartbeat_age_seconds", "Seconds since the worker's last report.",
     lambda w: w["heartbeat_age"]),
    ("mpwatch_worker_gpu_memory_bytes", "GPU memory the worker's processes hold on its own GPU (NVML).",
     lambda w: None if w["gpu"] is None else w["gpu"]["mem_bytes"]),
]


def families(st: Status, host: str) -> list[Family]:
    run = st["run"]
    node_info = run.get("node")
    node = str(node_info["node_rank"]) if node_info else "0"
    run_id = run["id"]
    info = {"run_id": run_id, "node": node, "host": host, "script": run["script"], "state": run["state"],
            "world_size": str(node_info["world_size"] if node_info else run["world_size"]),
            "version": __version__,
            "stop_signal": run["options"].get("stop_signal", "SIGTERM")}
    out = [Family("mpwatch_run_info", "gauge", "The run this supervisor watches (one per node).",
                  [(*_one(info), 1.0)])]
    out += _run_pace(st, run_id, node)
    out += _workers(st["workers"], run_id, node, {g["index"]: g.get("uuid") for g in st["gpus"]})
    out += _gpus(st, run_id, node)
    out.append(_alerts(st, run_id, node))
    return out


def _run_pace(st: Status, run_id: str, node: str) -> list[Family]:
    """The run's steps a second (the median stepping rank's pace) and its ratio to its own best
    (contract.slowdown), once it has one: no sample before."""
    pace = st["run"].get("pace")
    rate = pace["steps_per_s"] if pace is not None else slowdown.steps_per_s(
        [p for w in st["workers"] if (p := w["pace"]) is not None])
    lab = _one({"run_id": run_id, "node": node})
    return [Family("mpwatch_run_steps_per_second", "gauge",
                   "The run's steps a second: the median stepping rank's pace over its latest steps, "
                   "pauses aside.",
                   [(*lab, float(rate))] if rate is not None else []),
            Family("mpwatch_run_pace_ratio", "gauge",
                   "The run's pace against its own best sustained pace: 1 at its best, 0.6 when each step "
                   "takes 1.67x as long (a unit of work where the script reports its steps' work).",
                   [(*lab, float(pace["ratio"]))] if pace is not None else [])]


def _mig_labels(mig: MigSlice | None) -> Labels:
    """DCGM exporter's labels of a MIG slice (none on a whole GPU)."""
    return {} if mig is None else {"GPU_I_ID": str(mig["gi"]), "GPU_I_PROFILE": mig["profile"] or ""}


def _worker_labels(w: WorkerStatus, run_id: str, node: str, gpu_uuids: dict[int, str | None]) -> Labels:
    gpu = w["gpu"]
    mig = gpu.get("mig") if gpu is not None else None
    uuid = gpu_uuids.get(gpu["index"]) if gpu is not None and mig is not None and gpu["index"] is not None \
        else gpu["uuid"] if gpu is not None else None  # on a slice: its GPU's, as DCGM's UUID is
    return {"run_id": run_id, "node": node, "rank": str(w.get("global_rank", w["rank"])),
            "gpu": "" if gpu is None or gpu["index"] is None else str(gpu["index"]),
            "UUID": uuid or "", **_mig_labels(mig)}


def _workers(workers: list[WorkerStatus], run_id: str, node: str,
             gpu_uuids: dict[int, str | None]) -> list[Family]:
    labels = [_one(_worker_labels(w, run_id, node, gpu_uuids)) for w in workers]
    out = []
    for name, text, value in WORKER_GAUGES:
        samples = []
        for w, (lab, rendered) in zip(workers, labels, strict=True):
            v = value(w)
            if v is not None:
                samples.append((lab, rendered, float(v)))
        out.append(Family(name, "gauge", text, samples))
    restarts = [(lab, rendered, float(w["restarts"]))
                for w, (lab, rendered) in zip(workers, labels, strict=True)]
    out.append(Family("mpwatch_worker_restarts_total", "counter", "Times the worker was started again.",
                      restarts))
    states = []
    for w, one in zip(workers, labels, strict=True):
        for s in STATES:
            states.append((*_plus(one, "state", s), 1.0 if w["state"] == s else 0.0))
    out.append(Family("mpwatch_worker_state", "gauge", "1 for the worker's state now, 0 for the others.",
                      states))
    return out + _paces(workers, labels)


def _paces(workers: list[WorkerStatus], labels: list[tuple[Labels, str]]) -> list[Family]:
    """Seconds a step in each phase and each phase's speed against the median rank (the pace:
    medians over the rank's latest steps), a sample per phase; none for a rank without a pace."""
    secs, speed = [], []
    for w, labs in zip(workers, labels, strict=True):
        p = w["pace"]
        if p is None:
            continue
        for name, v in p["phases"].items():
            one = _plus(labs, "phase", name)  # a worker's word: a lone surrogate, a quote, a newline
            secs.append((*one, v))
            if name in p["relative"]:
                speed.append((*one, p["relative"][name]))
    return [Family("mpwatch_worker_phase_seconds", "gauge",
                   "Seconds a step of the worker spends in the phase (median of its latest steps).", secs),
            Family("mpwatch_worker_relative_speed", "gauge",
                   "The worker's speed in the phase against the median rank's: 1 as fast, 0.05 twenty times "
                   "slower.", speed)]


def _gpus(st: Status, run_id: str, node: str) -> list[Family]:
    used, total, util = [], [], []
    uuids = {g["index"]: g.get("uuid") for g in st["gpus"]}
    for g in leaves(st["gpus"]):
        lab, rendered = _one(_gpu_labels(g, run_id, node, uuids))
        if g["mem_used"] is not None:
            used.append((lab, rendered, float(g["mem_used"])))
        if g["mem_total"] is not None:
            total.append((lab, rendered, float(g["mem_total"])))
        if g["util_gpu"] is not None:
            util.append((lab, rendered, g["util_gpu"] / 100.0))
    return [Family("mpwatch_gpu_memory_used_bytes", "gauge", "GPU memory in use (NVML).", used),
            Family("mpwatch_gpu_memory_total_bytes", "gauge", "GPU memory in all (NVML).", total),
            Family("mpwatch_gpu_utilization_ratio", "gauge", "Share of time the GPU was busy, 0 to 1 (NVML).",
                   util)]


def _gpu_labels(g: GpuView, run_id: str, node: str, uuids: dict[int, str | None]) -> Labels:
    mig = g.get("mig")
    return {"run_id": run_id, "node": node, "gpu": str(g.get("node_index", g["index"])),
            "UUID": (uuids.get(g["index"]) if mig is not None else g.get("uuid")) or "", **_mig_labels(mig)}


def _alerts(st: Status, run_id: str, node: str) -> Family:
    """Alerts the status lists now: the GPUs' (while they last) and the run's (disk, hang,
    unkillable, ...: the recent ones), by kind; every kind of both is there, at 0 when none (one
    rule: a dashboard's query finds each kind before it ever fires)."""
    counts = dict.fromkeys(sorted(ALERT_KINDS | RUN_ALERT_KINDS), 0)
    for g in devices(st["gpus"]):
        for a in g["alerts"]:
            counts[a["kind"]] = counts.get(a["kind"], 0) + 1
    for ra in st["alerts"]:
        counts[ra["kind"]] = counts.get(ra["kind"], 0) + 1
    return Family("mpwatch_alerts", "gauge", "Alerts the run's status lists now, by kind.",
                  [(*_one({"run_id": run_id, "node": node, "kind": k}), float(n)) for k, n in counts.items()])


def _value(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (math.inf, -math.inf):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def text(fams: list[Family]) -> bytes:
    """Prometheus' text format 0.0.4 (the samples prometheus_client's generate_latest writes)."""
    out: list[str] = []
    for f in fams:
        out.append(f"# HELP {f.name} {f.help}\n# TYPE {f.name} {f.kind}\n")
        name = f.name
        out += [f"{name}{rendered} {_value(v)}\n" for _, rendered, v in f.samples]
    return "".join(out).encode()


class RunCollector(Collector):
    """The same families for prometheus_client (a registry; OpenMetrics when a scraper asks)."""

    def __init__(self, status: Callable[[], Status], host: str | None = None):
        self.status = status
        self.host = host or socket.gethostname()

    def describe(self) -> list[Metric]:
        return []  # nothing at registration: the families are built at each scrape

    def collect(self) -> Iterator[Metric]:
        for f in families(self.status(), self.host):
            base = f.name.removesuffix("_total") if f.kind == "counter" else f.name
            fam: Metric = (CounterMetricFamily(base, f.help) if f.kind == "counter"
                           else GaugeMetricFamily(base, f.help))
            fam.samples = [Sample(f.name, lab, v) for lab, _, v in f.samples]
            yield fam
