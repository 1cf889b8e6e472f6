"""The recorder's two-node scenario (`python -m tests.record nodes`): a real 2-node run, two
headless supervisors meeting in torch's rendezvous (gloo), each "on" a machine of its own
(127.0.0.1 and 127.0.0.2, its own runtime directory, its own scripted NVML with two GPUs),
four ranks each, merged by the real MergedSource (sources.multinode.source) as `mpwatch attach`
merges them. Global rank 5 (node 1's rank 1) gets stuck loading a batch; the seven others
wait for it in all_reduce: the merged analysis names it, which node 0 alone cannot.

Written like the other scenarios (tests/record.py's `record`): the merged status, its events,
each global rank's history and logs, the stack dumps, the merged GPU timeline; and, for the
merge's own tests, `node_statuses`: each supervisor's own status, as `ctl status --json`
printed it, normalised the same way.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mpwatch.sources.multinode.source import LocalLink, MergedSource
from tests.helpers import ROOT, HeadlessRun, wait_for
from tests.nodes.conftest import free_port, node_flags
from tests.record import TIMELINE_WINDOWS, Normaliser, nvml_node

WORKER = ROOT / "tests" / "remote" / "fixtures" / "ddp_hang.py"

HOSTS = ("127.0.0.1", "127.0.0.2")  # how the tests' sshd reaches the two "machines"
CULPRIT = 5  # global rank: node 1's rank 1


def _ready(st: dict[str, Any]) -> bool:
    ws = st["workers"]
    s = st["straggler"] or {}
    return (len(ws) == 8 and len(st["gpus"]) == 4 and all(w["state"] == "stalled" for w in ws)
            and all((w["stall"] or {}).get("where") for w in ws) and s.get("culprits") == [CULPRIT]
            and sum(bool((w["stall"] or {}).get("collective")) for w in ws) == 7
            and all(n["reachable"] for n in st["nodes"]))


def record_nodes(tmp: Path) -> dict[str, Any]:
    runs = []
    port = free_port()
    for node, host in enumerate(HOSTS):
        xdg = tmp / f"xdg-{node}"
        xdg.mkdir(mode=0o700)
        nvml = tmp / f"nvml-{node}.json"
        nvml.write_text(json.dumps(nvml_node(node)))
        env = dict(os.environ, XDG_RUNTIME_DIR=str(xdg), MPWATCH_FAKE_NVML=str(nvml),
                   HANG_RANK=str(CULPRIT), HANG_AT="40")
        (tmp / host).mkdir()
        runs.append(HeadlessRun(tmp / host, WORKER, n=4, env=env,
                                opts=[*node_flags("static", node, port), "--stall-timeout", "4",
                                      "--gpu-interval", "0.5"]))
    source = MergedSource()
    try:
        for run in runs:
            run.start()
        for node, (run, host) in enumerate(zip(runs, HOSTS, strict=True)):
            link = LocalLink.connect(str(run.run_dir))
            source.add(host, str(run.run_dir), link, node=node, status=link.status())
        status = wait_for(lambda: (lambda st: st if _ready(dict(st)) else None)(source.status()),
                          180, interval=0.3, what="both nodes stalled, rank 5 named")
        events = [dict(e) for e in source.events(0)["events"]]
        timeline = {str(w): source.gpu_timeline(w) for w in TIMELINE_WINDOWS}
        ranks = [w["rank"] for w in status["workers"]]
        history = {str(r): [list(p) for p in source.history(r)] for r in ranks}
        logs = {str(r): {s: source.logs(r, s, 12) for s in ("stdout", "stderr")} for r in ranks}
        node_statuses = [run.status() for run in runs]
        dumps = {w["last_dump"]: Path(w["last_dump"]).read_text(errors="replace")
                 for w in status["workers"] if w["last_dump"]}
    finally:
        source.close()
        for run in runs:
            run.cleanup()
    ids = [st["run"]["id"] for st in node_statuses]
    more = {str(runs[1].run_dir): "/srv/runs/nodes-b"}
    if ids[1] != ids[0]:  # each machine names its run; the same second and script give the same id
        more[ids[1]] = "20260101-000000-nodes-b"
    norm = Normaliser("nodes", runs[0].run_dir, status["run"]["started"], ids[0], more)
    norm.assign(dict(status), events)
    data = {"scenario": "nodes", "recorded_with": "python -m tests.record nodes", "status": status,
            "events": events, "lines": [], "history": history, "logs": logs, "dumps": dumps,
            "timeline": timeline, "node_statuses": node_statuses}
    norm.collect(data)
    return norm(data)
