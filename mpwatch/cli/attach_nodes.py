"""`mpwatch attach HOST:RUN [...]`: the TUI on runs of other machines (through ssh and
`mpwatch bridge`), or of several nodes at once, as one merged view (sources.multinode.source).
Every target named is reached before the screen opens (a failure is one line, exit code 2);
the peers a multi-node run names are found afterwards, and a node lost later is shown
unreachable and tried again. Main thread.
"""
from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mpwatch.cli.args import die
from mpwatch.contract import Status
from mpwatch.settings import Settings
from mpwatch.sources.local import Client, ClientError, Requests
from mpwatch.sources.multinode.source import LocalLink, MergedSource, NoNodeYet
from mpwatch.sources.remote.client import RemoteClient, Transport, parse_target
from mpwatch.text import safe

STOP_WAIT_S = 60.0  # after "stop the run": how long to wait for every node to end


def has_peers(client: Client) -> bool:
    """Is this run one node of several (its status names peers)?"""
    try:
        info = client.status(tail=0)["run"].get("node")
    except ClientError:
        return False
    return info is not None and len(info["peers"]) > 1


def _reach(target: str | None, transport: Transport, tmpdir: Path) -> tuple[str, Requests, Status]:
    """(host, link, its first status) of one target; raises ClientError."""
    remote = parse_target(target) if target else None
    link: Requests = RemoteClient(remote, transport) if remote is not None \
        else LocalLink.connect(target, tmpdir)
    try:
        return (remote.host if remote else ""), link, link.status(tail=0)
    except ClientError:
        link.close()
        raise


def connect(targets: list[str], transport: Transport, tmpdir: Path) -> MergedSource:
    """Every target reached (at the same time: each is an ssh login), or ClientError for the
    first that could not be, the others closed."""
    wanted: list[str | None] = [*targets] or [None]  # None: the newest run here
    with ThreadPoolExecutor(max_workers=min(len(wanted), 16)) as pool:
        futures = [pool.submit(_reach, t, transport, tmpdir) for t in wanted]
        got: list[tuple[str, Requests, Status] | ClientError] = []
        for f in futures:
            try:
                got.append(f.result())
            except ClientError as exc:
                got.append(exc)
    failed = [g for g in got if isinstance(g, ClientError)]
    reached = [g for g in got if not isinstance(g, ClientError)]
    if failed:
        for _, link, _ in reached:
            link.close()
        raise failed[0]
    source = MergedSource(transport)
    for i, (host, link, st) in enumerate(reached):
        info = st["run"].get("node")
        run = st["run"]["id"] if host else str(st["run"]["dir"])
        source.add(host, run, link, node=info["node_rank"] if info else i, status=st)
    return source


def attach_nodes(targets: list[str], remote_mpwatch: str | None, settings: Settings,
                 mouse: bool = True) -> int:
    try:
        from mpwatch.tui.app import MpwatchApp
        from mpwatch.tui.render import glyphs
    except ImportError:
        return die("the TUI is not installed (pip install textual); use 'mpwatch ctl --host HOST status'")
    try:
        source = connect(targets, Transport.from_settings(settings, remote_mpwatch), settings.tmpdir)
    except ClientError as exc:
        return die(str(exc))
    try:
        outcome = MpwatchApp(source, None, glyphs=glyphs.pick(ascii_only=settings.ascii)).run(mouse=mouse)
        if outcome is not None and outcome.kind == "stopped" and outcome.exit_code is None:
            return _wait_stopped(source)
    finally:
        source.close()
    if outcome is None or outcome.kind == "detach":
        if outcome is not None:
            again = " ".join(targets) or "RUN"
            print(safe.text(f"mpwatch: detached; the run goes on on every node ('mpwatch attach {again}' "
                            "shows it again)"), file=sys.stderr)
        return 0
    return 1 if outcome.exit_code is None else int(outcome.exit_code)


def ended_lines(st: Status | None, code: int) -> list[str]:
    """After 'stop the run' across nodes: how it ended, and where each node's ranks' ends are told
    (`mpwatch summary` reads a run directory: on that node)."""
    out = [f"mpwatch: the run ended on every node, exit code {code}"]
    for n in (st.get("nodes") or []) if st is not None else []:
        where = f"on {n['host']}" if n["host"] else "here"
        if n["run_id"]:
            out.append(f"mpwatch: node {n['node']}'s ranks: mpwatch summary {n['run_id']} ({where})")
    return out


def _wait_stopped(source: MergedSource) -> int:
    print("mpwatch: waiting for the run to stop on every node…", file=sys.stderr)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        try:
            source.status(tail=0)
        except ClientError:
            st, info = source.ended()
            code = (info or {}).get("exit_code")
            code = code if isinstance(code, int) else 1
            for line in ended_lines(st, code):
                print(safe.text(line), file=sys.stderr)
            return code
        except NoNodeYet:
            pass  # no node answered this time: ask again
        time.sleep(0.5)
    print("mpwatch: the run is still stopping on some node; see 'mpwatch ls --host HOST'", file=sys.stderr)
    return 1
