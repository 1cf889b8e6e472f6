"""`mpwatch attach HOST:RUN HOST:RUN` through the test's sshd: two supervisors, one "on" each
of 127.0.0.1 and 127.0.0.2 (each with its own runtime directory), in one merged TUI driven by
Pilot. Every rank on screen with its node; actions reach the rank's own node; a node whose
ssh is killed, or whose bridge is, shows as unreachable with the reason (never as a hang),
and comes back by itself; pause-all and stop reach every node."""
from __future__ import annotations

import os
import signal

import psutil
import pytest

from mpwatch.cli.attach_nodes import connect
from mpwatch.settings import Settings
from mpwatch.sources.remote.client import Transport
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.quit import QuitDialog
from tests.helpers import FIXTURES, assert_gone, wait_for
from tests.remote.sshd import ADDRESSES, REMOTE_MPWATCH
from tests.tui.conftest import said, until

pytestmark = pytest.mark.timeout(240)
WORKER = FIXTURES / "tui_worker.py"


def transport(sshd) -> Transport:
    cfg = sshd.client_config
    return Transport(ssh=("ssh", "-F", str(cfg)), remote_mpwatch=REMOTE_MPWATCH)


@pytest.fixture
def two_nodes(headless, sshd):
    """A 2-rank and a 3-rank run, one per address, and their targets."""
    runs = [headless(WORKER, n=n, env=sshd.node_env(addr), opts=["--grace", "2"])
            for n, addr in zip((2, 3), ADDRESSES, strict=True)]
    for run in runs:
        wait_for(lambda run=run: all(w["step"] is not None for w in run.status()["workers"]), 60,
                 what="every rank reporting")
    targets = [f"{addr}:{run.status()['run']['id']}" for addr, run in zip(ADDRESSES, runs, strict=True)]
    return runs, targets


def rows(app) -> dict[int, dict]:
    return {w["rank"]: w for w in (app.status or {}).get("workers", [])}


def ssh_pids(source) -> list[int]:
    return [n.link.proc.pid for n in source.nodes if n.link is not None]


async def test_attach_two_nodes_shows_every_rank_and_routes_actions(two_nodes, sshd):
    runs, targets = two_nodes
    source = connect(targets, transport(sshd), Settings().tmpdir)
    app = MpwatchApp(source, None, glyphs=glyphs.UNICODE, notices=False)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 5 and all(w["step"] for w in rows(app).values()),
                        what="five ranks with steps")
            ws = rows(app)
            assert [(r, ws[r]["node"], ws[r]["local_rank"]) for r in sorted(ws)] == [
                (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1), (4, 1, 2)]
            keys = [c.key for c in app.table.cols]
            assert keys[:2] == ["rank", "node"]
            assert [c.plain.strip() for c in app.table.get_row("w3")][:2] == ["3", "1"]
            header = str(app.header.render())
            assert "node 0 127.0.0.1" in header and "node 1 127.0.0.2" in header
            assert "5 workers" in header and "3 workers" in header
            # global rank 3 is rank 1 of node 1: the pause reaches that supervisor, and only it
            app.table.select_key("w3")
            await pilot.press("p")
            await until(pilot, lambda: said(app, "node 1: paused rank 1"), what="the pause reply")
            runs[1].wait_event("paused", lambda r: r["rank"] == 1)
            await until(pilot, lambda: rows(app)[3]["state"] == "paused", what="rank 3 paused on screen")
            assert not runs[0].events("paused") and rows(app)[1]["state"] == "running"
            # the detail view's curve comes from the rank's own node
            # (its first line: the worker prints a line every 20 steps, so ask for more than there are)
            assert source.history(3) and source.logs(3, "stdout", 1000)[0].startswith("tui worker rank 1")
            await pilot.press("P")  # rank 3 paused, others running: pause all, on every node
            for run, n in zip(runs, (2, 3), strict=True):
                run.wait_event("paused", count=n if run is runs[0] else 3)
            await pilot.press("q")
            await until(pilot, lambda: isinstance(app.screen, QuitDialog), what="the quit dialog")
            await pilot.press("s")
            for run in runs:
                assert run.wait_exit(timeout=60) == 1
            await until(pilot, lambda: not app.live, what="the run's end on screen")
    finally:
        source.close()
    pids = set().union(*(run.all_pids() for run in runs))
    assert_gone(pids)


async def test_a_lost_node_is_unreachable_then_back_never_a_hang(two_nodes, sshd):
    _, targets = two_nodes
    source = connect(targets, transport(sshd), Settings().tmpdir)
    app = MpwatchApp(source, None, glyphs=glyphs.UNICODE, notices=False)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 5, what="five ranks")
            # 1: the ssh client of node 1 is killed; the daemon is stopped so that it stays lost
            sshd.stop()
            node1 = next(n for n in source.nodes if n.node == 1)
            os.kill(node1.link.proc.pid, signal.SIGKILL)
            await until(pilot, lambda: any(not n["reachable"] for n in app.status["nodes"]), 60,
                        what="node 1 shown unreachable")
            n1 = next(n for n in app.status["nodes"] if n["node"] == 1)
            assert not n1["reachable"] and n1["error"]
            await until(pilot, lambda: "Connection refused" in (next(
                n for n in app.status["nodes"] if n["node"] == 1)["error"] or ""), 60,
                what="the retry's reason: ssh's own words")
            header = str(app.header.render())
            assert "node 1 127.0.0.2" in header and "unreachable" in header and "Connection refused" in header
            for r in (2, 3, 4):
                cells = [c.plain for c in app.table.get_row(f"w{r}")]
                assert "unreachable" in cells and "stalled" not in " ".join(cells)
                assert rows(app)[r]["node_error"]
            assert all("node_error" not in rows(app)[r] for r in (0, 1))
            assert not [a for a in app.status["alerts"] if a["kind"] == "hang"]
            assert said(app, "node 1 (127.0.0.2) unreachable")
            # 2: the host comes back: so does the node, in the same TUI
            sshd.start()
            await until(pilot, lambda: all(n["reachable"] for n in app.status["nodes"]), 90,
                        what="node 1 back")
            await until(pilot, lambda: all("node_error" not in w for w in rows(app).values()), 30,
                        what="its rows live again")
            assert said(app, "node 1 (127.0.0.2) is back")
            step = rows(app)[4]["step"]
            await until(pilot, lambda: rows(app)[4]["step"] > step, what="node 1's steps moving on screen")
            # 3: the bridge on node 0 is killed: node 0 is lost and comes back by itself
            bridge = next(p for p in psutil.process_iter(["cmdline"])
                          if "bridge" in (p.info["cmdline"] or []) and targets[0].split(":")[1]
                          in (p.info["cmdline"] or []))
            bridge.kill()
            await until(pilot, lambda: said(app, "node 0 (127.0.0.1) unreachable"), 60, what="node 0 lost")
            await until(pilot, lambda: said(app, "node 0 (127.0.0.1) is back"), 60, what="node 0 back")
    finally:
        source.close()
    wait_for(lambda: not [p for p in ssh_pids(source) if psutil.pid_exists(p)], 20, what="ssh clients to end")
