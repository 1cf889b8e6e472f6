"""A real 2-node run (gloo; two supervisors meeting in torch's rendezvous, one on 127.0.0.1
and one on 127.0.0.2, each registered in its own machine's runtime directory), watched
through the test's sshd: `attach 127.0.0.1:RUN` opens node 0, finds node 1 from its status
(RunInfo.node's peers) and opens it over ssh too; every rank is on screen by global rank; a
hang planted on node 1 is named from the merged view with its victims on both nodes."""
from __future__ import annotations

import pytest

from mpwatch.cli.attach_nodes import connect, has_peers
from mpwatch.settings import Settings
from mpwatch.sources.local import Client
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from tests.helpers import HeadlessRun, assert_gone, need, wait_for
from tests.nodes.conftest import free_port, node_flags, node_info
from tests.remote.sshd import ADDRESSES
from tests.remote.test_attach import rows, transport
from tests.tui.conftest import until

need("torch", "several nodes meet in torch's rendezvous (the demo extra)")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(300)]
HANG = __import__("pathlib").Path(__file__).parent / "fixtures" / "ddp_hang.py"
CULPRIT = 3  # global rank: node 1's local rank 1


@pytest.fixture
def real_two_nodes(sshd, tmp_path):
    port = free_port()
    runs = []
    try:
        for node, addr in enumerate(ADDRESSES):
            env = {**sshd.node_env(addr), "HANG_RANK": str(CULPRIT), "HANG_AT": "15"}
            run = HeadlessRun(tmp_path / f"node{node}", HANG, n=2, env=env,
                              opts=[*node_flags("static", node, port), "--stall-timeout", "4", "--grace", "2"])
            run.tmp.mkdir(parents=True)
            runs.append(run.start())
        wait_for(lambda: all(node_info(r) for r in runs), 120, what="the first rendezvous round")
        yield runs
    finally:
        for run in runs:
            run.cleanup()


async def test_attach_one_node_finds_the_other_and_names_the_hang_across_nodes(real_two_nodes, sshd):
    runs = real_two_nodes
    node0 = runs[0].status()["run"]
    with Client.at(runs[0].run_dir) as c:
        assert has_peers(c)  # `mpwatch attach RUN` here would open the merged view too
    # node 0 only: node 1 is found
    source = connect([f"{ADDRESSES[0]}:{node0['id']}"], transport(sshd), Settings().tmpdir)
    app = MpwatchApp(source, None, glyphs=glyphs.UNICODE, notices=False)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 4 and all(n["reachable"] for n in app.status["nodes"]),
                        120, what="both nodes' ranks")
            ws = rows(app)
            assert [(r, ws[r]["node"], ws[r]["local_rank"]) for r in range(4)] == [
                (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
            assert [(n["node"], n["host"]) for n in app.status["nodes"]] == [(0, ADDRESSES[0]), (1, ADDRESSES[1])]
            assert node0["node"]["job_id"] == "none"  # static: no job name, so node 0's run id names it
            assert app.status["run"]["id"] == f"{node0['id']} +1" and app.status["run"]["world_size"] == 4
            # Ranks stall one by one (each after its own timeout): wait until all three wait on the culprit.
            await until(pilot, lambda: (app.status["straggler"] or {}).get("culprits") == [CULPRIT]
                        and len((app.status["straggler"] or {}).get("waiting", [])) == 3, 120,
                        what="the culprit named from the merged view, the three others waiting")
            text = app.status["straggler"]["text"]
            assert text.startswith("the 3 others wait in all_reduce at step ") and "(in load_batch" in text, text
            assert f" for rank {CULPRIT} on node 1, which is at step " in text, text
            assert str(app.alert_lines.render()).count(f"rank {CULPRIT} on node 1") == 1
            header = str(app.header.render())
            assert "node 0 127.0.0.1" in header and "node 1 127.0.0.2" in header and "◆ 2 stalled" in header
            # stop from the merged view: every node's run ends
            await pilot.press("q")
            await pilot.press("s")
            for run in runs:
                assert run.wait_exit(timeout=90) == 1
    finally:
        source.close()
    assert_gone(set().union(*(r.all_pids() for r in runs)))
