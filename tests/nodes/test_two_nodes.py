"""Two supervisors as two nodes of one run (127.0.0.1 and 127.0.0.2 on this machine), on
torch's own rendezvous, static and c10d: the workers' torchrun environment and global
ranks, each node's records of the others in its status and run.json, and the metrics each node
serves (its own ranks, by global rank, labelled with its node)."""
from __future__ import annotations

import json
import urllib.request

import pytest

from tests.helpers import FIXTURES, need, wait_for
from tests.nodes.conftest import ADDRS, env_lines, explain, final, free_port, node_info

need("torch", "several nodes meet in torch's rendezvous (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(240)]

BACKENDS = ("static", "c10d")


def control(run) -> dict:
    return json.loads((run.run_dir / "control.json").read_text())


def scrape(url: str) -> dict[str, list]:
    """A real scrape of a node's metrics, read by prometheus_client's own parser: name -> samples."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=30) as r:
        text = r.read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_nodes_get_torchruns_environment_and_find_each_other(two_nodes, backend):
    # node 0 runs 2 workers, node 1 one: global ranks and world sizes must come out as torch's agent gives them
    metrics = free_port()  # each node serves its own metrics at its own address, on the same port
    a, b = two_nodes(FIXTURES / "print_env.py", "600", backend=backend, n=(2, 1),
                     node_opts=[["--metrics-port", metrics, "--metrics-addr", addr] for addr in ADDRS])
    infos = [wait_for(lambda r=r: node_info(r), 90, what="the first round") for r in (a, b)]
    by_rank = {i["node_rank"]: (run, i) for run, i in zip((a, b), infos, strict=True)}
    assert sorted(by_rank) == [0, 1], infos
    if backend == "static":
        assert infos[0]["node_rank"] == 0 and infos[1]["node_rank"] == 1
    base = 0
    for group_rank in (0, 1):
        run, info = by_rank[group_rank]
        assert info["base_rank"] == base, info
        base += run.n
    for run, info in zip((a, b), infos, strict=True):
        assert (info["nnodes"], info["world_size"], info["round"], info["rdzv_backend"]) == (2, 3, 0, backend)
        assert info["job_id"] == ("job7" if backend == "c10d" else "none")
        assert info["host"] == ADDRS[(a, b).index(run)]
        # every peer, this node included: where its supervisor lives, for `attach` to find it
        peers = {p["node_rank"]: p for p in info["peers"]}
        assert sorted(peers) == [0, 1]
        for other in (a, b):
            oi = infos[(a, b).index(other)]
            p = peers[oi["node_rank"]]
            assert p["host"] == oi["host"] and p["run_id"] == control(other)["run_id"]
            assert p["run_dir"] == str(other.run_dir.resolve()) and p["pid"] == other.proc.pid
            assert (p["nprocs"], p["base_rank"], p["state"]) == (other.n, oi["base_rank"], "up")
        # run.json says it too (a finished node's directory still names its peers)
        assert json.loads((run.run_dir / "run.json").read_text())["node"]["peers"] == [
            {k: v for k, v in p.items() if k != "state"} | {"state": "up"} for p in info["peers"]]

    def envs_printed():
        return all(len(env_lines(r, k)) == 1 for r in (a, b) for k in range(r.n))
    wait_for(envs_printed, 60, what="every worker's environment")
    master = None
    for run, info in zip((a, b), infos, strict=True):
        ws = run.status()["workers"]
        assert [w["global_rank"] for w in ws] == [info["base_rank"] + k for k in range(run.n)]
        for k in range(run.n):
            env = env_lines(run, k)[0]
            assert env["RANK"] == env["ROLE_RANK"] == str(info["base_rank"] + k)
            assert env["LOCAL_RANK"] == env["MPWATCH_RANK"] == str(k)
            assert env["GROUP_RANK"] == str(info["node_rank"])
            assert (env["WORLD_SIZE"], env["ROLE_WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == (
                "3", "3", str(run.n), "2")
            assert env["ROLE_NAME"] == "default"
            assert env["TORCHELASTIC_RUN_ID"] == info["job_id"]
            assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("0", "0")
            # static: the workers' store is the supervisor's; c10d: a fresh one each round (supervisor.nodes.rendezvous)
            assert env["TORCHELASTIC_USE_AGENT_STORE"] == str(backend == "static")
            master = master or (env["MASTER_ADDR"], env["MASTER_PORT"])
            assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == master  # every worker of every node: one store
    # each node's metrics: its own ranks, by their global rank, labelled with its node rank
    for run, info in zip((a, b), infos, strict=True):
        wait_for(lambda run=run: all(w["step"] is not None for w in run.status()["workers"]), 60,
                 what="every worker's report")
        got = scrape(f"http://{info['host']}:{metrics}/metrics")
        assert {s.labels["rank"] for s in got["mpwatch_worker_step"]} == {
            str(info["base_rank"] + k) for k in range(run.n)}, got["mpwatch_worker_step"]
        assert {s.labels["node"] for fam in got.values() for s in fam} == {str(info["node_rank"])}
        assert got["mpwatch_run_info"][0].labels["world_size"] == "3"
    # ctl on a node takes that node's local ranks, as on one node; the size is torch's rendezvous's
    assert "dumping rank 0" in b.ctl("dump", "0").stdout
    res = b.ctl("kill", "1", check=False)
    assert res.returncode != 0 and "no rank 1 in this run (ranks: 0-0)" in res.stderr, res.stderr
    res = a.ctl("resize", "3", check=False)
    assert res.returncode != 0 and "keeps its size" in res.stderr, res.stderr
    a.ctl("stop")
    assert a.wait_exit(60) == 1 and b.wait_exit(60) == 1, explain(a, b)
    # the stop asked on node 0 reached node 1 through the rendezvous store
    why = [e["why"] for e in b.events("stopping")]
    assert len(why) == 1 and why[0].startswith(f"stopped on node {infos[0]['node_rank']} (127.0.0.1)"), why
    assert final(b)["run"]["node"]["peers"], final(b)["run"]

