"""What `mpwatch attach` across nodes prints once the run it stopped has ended on every node,
fed the merged status a real two-node run made (the `nodes` recording): how it ended, and where
each node's ranks are told (it returned the exit code alone)."""
from __future__ import annotations

from mpwatch.cli.attach_nodes import ended_lines
from tests.tui.recorded import recording


def test_the_end_across_nodes_says_the_exit_code_and_each_nodes_summary():
    st = recording("nodes")["status"]
    assert ended_lines(st, 1) == [
        "mpwatch: the run ended on every node, exit code 1",
        "mpwatch: node 0's ranks: mpwatch summary 20260101-000000-nodes (on 127.0.0.1)",
        "mpwatch: node 1's ranks: mpwatch summary 20260101-000000-nodes-b (on 127.0.0.2)",
    ]


def test_no_status_left_still_says_how_it_ended():
    assert ended_lines(None, 0) == ["mpwatch: the run ended on every node, exit code 0"]
