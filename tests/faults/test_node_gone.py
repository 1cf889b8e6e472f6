"""A supervisor never waits on a peer that is gone (issue 39, item 12). Two nodes (static: node 0
hosts the rendezvous store). Found: a node whose own workers had ended (waiting for the others in
the exit barrier) took the store's failure for the end of the run and never said the host was
lost; and a store whose host stops answering (its supervisor frozen, its socket open) held the
node thread in torch's store call for the store's timeout, and no node was said lost meanwhile."""
from __future__ import annotations

import os
import signal

import pytest

from tests.faults.conftest import FAULTS
from tests.helpers import need, wait_for
from tests.nodes.conftest import kill9, node_info, two_nodes  # noqa: F401 - two_nodes: a fixture

need("torch", "several nodes meet in torch's rendezvous (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(240)]
LOST_ENV = {**os.environ, "MPWATCH_NODE_LOST_S": "3"}


def test_a_node_waiting_in_the_exit_barrier_says_the_store_host_lost(two_nodes):
    host, other = two_nodes(FAULTS / "node_ends.py", env=LOST_ENV)
    wait_for(lambda: node_info(other) and node_info(other)["state"] == "finishing", 120,
             what="node 1's workers ended, waiting for node 0")
    wait_for(lambda: (host.worker(0)["step"] or 0) >= 1, 60, what="node 0's worker stepping")
    kill9(host.proc.pid)
    lost = other.wait_event("node_lost", timeout=30)[0]
    assert lost["node_rank"] == 0 and "the rendezvous store at" in lost["why"], lost
    assert other.wait_exit(60) == 0  # its own workers ended well: the lost node is its alert's


def test_a_frozen_store_host_is_lost_within_its_time(two_nodes):
    host, other = two_nodes(FAULTS / "node_ends.py", env=LOST_ENV)
    wait_for(lambda: node_info(other) and node_info(other)["state"] == "finishing", 120,
             what="node 1's workers ended, waiting for node 0")
    os.kill(host.proc.pid, signal.SIGSTOP)  # its store's socket stays open; nothing answers
    try:
        lost = other.wait_event("node_lost", timeout=20)[0]
        assert lost["node_rank"] == 0 and "no answer in 3s" in lost["why"], lost
        assert other.wait_exit(60) == 0
    finally:
        kill9(host.proc.pid)
