"""Issue 32 across nodes: two supervisors as two nodes of one gloo DDP run (127.0.0.1 and
127.0.0.2), node 0 with ranks 0 and 1, node 1 with rank 2 on a slow Dataset. No node sees the
straggler alone (node 1 has no peer of its own to compare with, node 0's ranks both wait); the
merged view of both (sources.multinode, what `mpwatch attach` shows) names rank 2 on node 1, and
the ranks' speeds against the median rank are measured across the nodes."""
from __future__ import annotations

import pytest

from mpwatch.sources.multinode.source import LocalLink, MergedSource
from mpwatch.sources.remote.client import Transport
from tests.helpers import FIXTURES, need, wait_for
from tests.nodes.conftest import ADDRS, explain

need("torch", "several nodes meet in torch's rendezvous (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]


def test_the_merged_view_names_the_straggler_and_its_node(two_nodes):
    a, b = two_nodes(FIXTURES / "ddp_pace.py", "--slow-rank", "2", "--slow-data", "0.15", n=(2, 1))
    source = MergedSource(Transport())  # nodes here: no ssh
    try:
        for node, run in enumerate((a, b)):
            link = LocalLink.at(run.run_dir)
            source.add(ADDRS[node], str(run.run_dir), link, node=node, status=link.status())
        wait_for(lambda: len(source.status()["workers"]) == 3 and all(w["step"] for w in source.status()["workers"]),
                 150, interval=0.5, what="three ranks stepping on two nodes")

        def named():
            st = source.status()
            return next((x for x in st["alerts"] if x["kind"] == "straggler"), None) and st
        try:
            st = wait_for(named, 60, interval=0.5, what="the merged straggler finding")
        except AssertionError:
            raise AssertionError(explain(a, b)) from None
    finally:
        source.close()
    [found] = [x for x in st["alerts"] if x["kind"] == "straggler"]
    assert found["message"].startswith("rank 2 on node 1 is the straggler: its data takes 1"), found["message"]
    assert (found["rank"], found["straggler"]["node"], found["straggler"]["phase"]) == (2, 1, "data")
    by = {w["rank"]: w for w in st["workers"]}
    assert by[2]["node"] == 1 and by[2]["pace"]["relative"]["data"] < 0.05
    assert by[0]["pace"]["relative"]["data"] > 0.5  # measured against every node's ranks
    for run in (a, b):  # neither node names anybody on its own
        assert not [x for x in run.status()["alerts"] if x["kind"] == "straggler"]
