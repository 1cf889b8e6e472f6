"""Two nodes at work and at fault (127.0.0.1 and 127.0.0.2 on this machine): a DDP job
across them that learns and hangs on purpose, a c10d restart round of every node, and a
node whose supervisor is SIGKILLed, seen lost from the other."""
from __future__ import annotations

import os

import pytest

from tests.helpers import FIXTURES, ROOT, assert_gone, need, wait_for
from tests.nodes.conftest import ADDRS, explain, final, kill9, node_info

need("torch", "several nodes meet in torch's rendezvous (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]

BACKENDS = ("static", "c10d")


def wait_reporting(run, min_step: int = 3, timeout: float = 120) -> dict:
    def ok():
        st = run.status()
        ws = st["workers"]
        return st if ws and all(w["state"] == "running" and (w["step"] or 0) >= min_step for w in ws) else None
    return wait_for(ok, timeout, what=f"{run.run_dir.name}'s workers to report step {min_step}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_ddp_across_two_nodes_learns_and_a_hang_on_node_1_is_stalled_and_dumped_there(two_nodes, backend):
    # global rank 1 stops before its all_reduce of step 40: its peer on the other node waits for it
    a, b = two_nodes(ROOT / "demo" / "hang.py", "--steps", "400", "--hang-rank", "1", "--hang-step", "40",
                     "--step-time", "0.02", backend=backend, opts=["--stall-timeout", "6"])
    infos = [wait_for(lambda r=r: node_info(r), 90, what="the first round") for r in (a, b)]
    culprit, waiter = (a, b) if infos[0]["base_rank"] == 1 else (b, a)
    dumps = {}
    for run in (culprit, waiter):  # (a start slowed by torch's import may be called stalled and recover first)
        stall = run.wait_event("stalled", pred=lambda e: (e["step"] or 0) >= 39, timeout=120)[0]
        dumps[run] = run.wait_event("dump", pred=lambda e, t=stall["ts"]: e["ts"] >= t, timeout=60)[0]
    c, w = culprit.status()["workers"][0], waiter.status()["workers"][0]
    assert (c["global_rank"], w["global_rank"]) == (1, 0)
    assert c["state"] == w["state"] == "stalled", (c, w)
    assert c["step"] == 39 and w["step"] == 40, (c["step"], w["step"])  # the culprit never reported step 40
    assert c["stall"]["where"] and "hang_here" in c["stall"]["where"], c["stall"]
    assert w["stall"]["collective"] == "all_reduce", w["stall"]
    dump = culprit.run_dir / dumps[culprit]["path"]
    assert "hang_here" in dump.read_text()  # dumped on the culprit's own node
    for worker in (c, w):  # DDP across the two nodes learns: the loss falls
        tail = worker["loss_tail"]
        assert len(tail) >= 16 and sum(tail[-8:]) / 8 < sum(tail[:8]) / 8, tail
    culprit.ctl("stop")  # on node 1's supervisor: it reaches node 0 through the rendezvous store
    assert culprit.wait_exit(60) == 1 and waiter.wait_exit(60) == 1, explain(a, b)
    assert [e["why"].split(":")[0] for e in waiter.events("stopping")] == [
        f"stopped on node {infos[(a, b).index(culprit)]['node_rank']} ({ADDRS[(a, b).index(culprit)]})"]


def test_c10d_failure_on_one_node_restarts_every_node_in_round_1(two_nodes, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    # global rank 1 fails at step 3; rank 0 is not in a collective then (it sleeps): only a new round ends it
    a, b = two_nodes(FIXTURES / "ddp_steps.py", "30", "1", marks, "aside", backend="c10d",
                     opts=["--max-restarts", "1"])
    assert a.wait_exit(180) == 0 and b.wait_exit(180) == 0, explain(a, b)
    for run in (a, b):
        rounds = run.events("round")
        assert [r["round"] for r in rounds] == [0, 1], rounds
        assert rounds[1]["world_size"] == 2
        fin = final(run)
        assert fin["run"]["node"]["round"] == 1 and fin["workers"][0]["restarts"] == 1, fin["run"]
        assert fin["workers"][0]["step"] == 29 and fin["workers"][0]["state"] == "exited"
        assert [e["why"].split(":")[0] for e in run.events("restarted")] == ["round 1"]
    whys = sorted(run.events("round")[1]["why"] for run in (a, b))
    # the other node followed through torch's num_nodes_waiting
    assert whys[0] == "another node started a new round" and whys[1].endswith("failed"), whys
    ends = sorted(run.events("worker_exited")[0]["cause"] for run in (a, b))
    assert ends[0].startswith("exit 3: rank 1 failing") and ends[1].startswith("stopped for a new rendezvous round"), ends
    # the node whose worker failed used one of its restarts: its workers are told so, as torchrun's are
    counts = sorted(run.log(0).count("restart 1") for run in (a, b))
    assert counts == [0, 1], [run.log(0) for run in (a, b)]


@pytest.mark.parametrize("backend,victim", [("static", 1), ("c10d", 0)])
def test_a_node_whose_supervisor_is_sigkilled_is_lost_on_the_other(two_nodes, backend, victim):
    # a node is lost after MPWATCH_NODE_LOST_S without a beat (10 s by default: 3 here)
    a, b = two_nodes(ROOT / "demo" / "hang.py", "--steps", "100000", "--step-time", "0.05", backend=backend,
                     opts=["--stall-timeout", "30"], env=dict(os.environ, MPWATCH_NODE_LOST_S="3"))
    for run in (a, b):
        wait_reporting(run)
    dead, alive = (a, b) if victim == 0 else (b, a)
    dead_info = node_info(dead)
    pids = dead.all_pids()
    assert pids
    kill9(dead.proc.pid)  # node 0's supervisor hosts the rendezvous store: then its store goes with it
    assert_gone(pids, timeout=20)  # its workers and their children end with it
    lost = alive.wait_event("node_lost", timeout=60)[0]
    assert (lost["node_rank"], lost["host"]) == (dead_info["node_rank"], dead_info["host"]), lost
    # the workers here fail their collectives and the run ends, as torchrun's would (no restarts asked);
    # it ends once the lost node is known (the exit barrier waits for the other nodes until then)
    assert alive.wait_exit(120) == 1, explain(alive)
    fin = final(alive)
    alert = [al for al in fin["alerts"] if al["kind"] == "node_lost"]
    assert len(alert) == 1 and f"node {dead_info['node_rank']} ({dead_info['host']}" in alert[0]["message"], alert
    peers = {p["node_rank"]: p["state"] for p in fin["run"]["node"]["peers"]}
    assert peers[dead_info["node_rank"]] == "lost", peers
    assert fin["workers"][0]["state"] == "failed"
    assert "stalled" not in {e["event"] for e in alive.events()}  # lost, not hung


def test_a_stop_while_c10d_waits_for_a_third_node_reaches_the_other_node(two_nodes):
    # --nnodes 3 and two supervisors: both wait in torch's rendezvous for a node that never comes
    a, b = two_nodes(FIXTURES / "print_env.py", backend="c10d", nnodes=3)
    for run in (a, b):
        wait_for(lambda run=run: run.status()["run"]["node"]["state"] == "joining", 60, what="torch's rendezvous")
    b.ctl("stop")  # node 1 closes the rendezvous on its way out: node 0 (its store's host) stops waiting there
    assert a.wait_exit(60) == 1 and b.wait_exit(60) == 1, explain(a, b)
    alerts = [e for e in a.events("alert") if e["kind"] == "rendezvous"]
    assert len(alerts) == 1 and "the rendezvous is closed: another node ended the run" in alerts[0]["message"], alerts
    assert not a.events("worker_started")
