"""The recorder's two-node scenario (`python -m tests.record nodes`): a real 2-node run, two
headless supervisors meeting in torch's rendezvous (gloo), each "on" a machine of its own
(127.0.0.1 and 127.0.0.2, its own runtime directory, its own scripted NVML with two GPUs),
four ranks each, merged by the real MergedSource (sources.multinode.source) as `mpwatch attach`
merges them. Global rank 5 (node 1's rank 1) gets stuck loading a batch; the seven others
wait for it in all_reduce: the merged analysis names it, which node 0 alone cannot.

Written like the other scenarios (tests/record.py's `record`): the merged status, its events,
each global rank's history and logs, the stack dumps, the merged GPU timeline; and, for the
merge's own tests, what each supervisor sent itself: `node_statuses` (as `ctl status --json`
printed it), `node_events` and `node_timelines` (its GPU timeline of the last 2 min); and
`lost`: node 1's supervisor then stops answering (SIGSTOPped, as a host that hangs), and the
merged view marks its ranks unreachable (`status`: the merged status then; `nodes`: what
MergedSource knew of each node: its last status, its error and for how long it has been down).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpwatch.sources.multinode.source import LocalLink, MergedSource
from mpwatch.sources.remote.client import Transport
from tests.helpers import ROOT, HeadlessRun, wait_for
from tests.nodes.conftest import free_port, node_flags
from tests.record import TIMELINE_WINDOWS, Normaliser, nvml_node

WORKER = ROOT / "tests" / "remote" / "fixtures" / "ddp_hang.py"

HOSTS = ("127.0.0.1", "127.0.0.2")  # how the tests' sshd reaches the two "machines"
CULPRIT = 5  # global rank: node 1's rank 1
LOST_TIMEOUT_S = 3.0  # how long the merged view waits for node 1's answer once it hangs


EXPECT: dict[str, Callable[[dict[str, Any]], bool]] = {
    "8 ranks on 4 GPUs": lambda st: len(st["workers"]) == 8 and len(st["gpus"]) == 4,
    "every rank stalled, in its frame": lambda st: all(
        w["state"] == "stalled" and (w["stall"] or {}).get("where") for w in st["workers"]),
    "the 7 others in their collective": lambda st: sum(bool((w["stall"] or {}).get("collective"))
                                                       for w in st["workers"]) == 7,
    f"rank {CULPRIT} named the culprit": lambda st: (st["straggler"] or {}).get("culprits") == [CULPRIT],
    "both nodes reachable": lambda st: all(n["reachable"] for n in st["nodes"]),
}


def _ready(st: dict[str, Any]) -> bool:
    return all(check(st) for check in EXPECT.values())


def record_nodes(tmp: Path) -> dict[str, Any]:
    runs = []
    port = free_port()
    xdgs: list[Path] = []
    for node, host in enumerate(HOSTS):
        # each machine's runtime directory: short, as the sockets live in it (a path under a test's
        # tmp_path passed the 107 bytes a socket's path may have: the supervisor did not start)
        xdgs.append(xdg := Path(tempfile.mkdtemp(prefix=f"mpw-node{node}-")))
        nvml = tmp / f"nvml-{node}.json"
        nvml.write_text(json.dumps(nvml_node(node)))
        env = dict(os.environ, XDG_RUNTIME_DIR=str(xdg), MPWATCH_SCRIPTED_NVML=str(nvml),
                   HANG_RANK=str(CULPRIT), HANG_AT="40")
        (tmp / host).mkdir()
        runs.append(HeadlessRun(tmp / host, WORKER, n=4, env=env,
                                opts=[*node_flags("static", node, port), "--stall-timeout", "4",
                                      "--gpu-interval", "0.5"]))
    source = MergedSource(Transport())  # nodes here: no ssh
    try:
        for node, run in enumerate(runs):
            run.start()
            if run.proc.poll() is not None:  # never started (its port taken meanwhile, say): said
                raise AssertionError(f"node {node}'s supervisor ended as it began: {run.stderr_text[-2000:]}")
        for node, (run, host) in enumerate(zip(runs, HOSTS, strict=True)):
            link = LocalLink.at(run.run_dir)
            source.add(host, str(run.run_dir), link, node=node, status=link.status())
        status = wait_for(lambda: (lambda st: st if _ready(dict(st)) else None)(source.status()),
                          180, interval=0.3, what="both nodes stalled, rank 5 named")
        events = [dict(e) for e in source.events(0)["events"]]
        timeline = {str(w): source.gpu_timeline(w) for w in TIMELINE_WINDOWS}
        ranks = [w["rank"] for w in status["workers"]]
        history = {str(r): [list(p) for p in source.history(r)] for r in ranks}
        logs = {str(r): {s: source.logs(r, s, 12) for s in ("stdout", "stderr")} for r in ranks}
        node_statuses = [run.status() for run in runs]
        node_events, node_timelines = [], []
        for run in runs:
            with LocalLink.at(run.run_dir) as link:
                node_events.append([dict(e) for e in link.events(0)["events"]])
                node_timelines.append(link.gpu_timeline(120))
        dumps = {w["last_dump"]: Path(w["last_dump"]).read_text(errors="replace")
                 for w in status["workers"] if w["last_dump"]}
        lost = _lose_node_1(source, runs[1])
    finally:
        source.close()
        for run in runs:
            if run.proc is not None:
                try:
                    os.kill(run.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
            run.cleanup()
        for xdg in xdgs:
            shutil.rmtree(xdg, ignore_errors=True)
    ids = [st["run"]["id"] for st in node_statuses]
    more = {str(runs[1].run_dir): "/srv/runs/nodes-b"}
    if ids[1] != ids[0]:  # each machine names its run; the same second and script give the same id
        more[ids[1]] = "20260101-000000-nodes-b"
    norm = Normaliser("nodes", runs[0].run_dir, status["run"]["started"], ids[0], more)
    norm.assign(dict(status), events)
    data = {"scenario": "nodes", "recorded_with": "python -m tests.record nodes", "status": status,
            "events": events, "lines": [], "history": history, "logs": logs, "dumps": dumps,
            "timeline": timeline, "node_statuses": node_statuses, "node_events": node_events,
            "node_timelines": node_timelines, "lost": lost}
    norm.collect(data)
    return norm(data)


def _lose_node_1(source: MergedSource, run: HeadlessRun) -> dict[str, Any]:
    """Node 1's supervisor stops answering: the merged view, once it says node 1 is
    unreachable (with the reason its link gave), and what it knew of each node then."""
    poller = source.nodes[1]
    assert poller.link is not None
    poller.link.timeout = LOST_TIMEOUT_S  # a LocalLink: a Client's timeout
    assert run.proc is not None
    os.kill(run.proc.pid, signal.SIGSTOP)

    def lost() -> Any:
        st = source.status()
        n1 = next(n for n in st["nodes"] if n["node"] == 1)
        return st if not n1["reachable"] and (n1["down_for"] or 0) >= 1.0 else None
    status = wait_for(lost, 60, interval=0.3, what="node 1 unreachable in the merged view")
    nodes = [{"node": p.node, "host": p.host, "status": p.status, "error": p.error, "down_for": p.down_for}
             for p in source._parts()]
    return {"status": status, "nodes": nodes}
