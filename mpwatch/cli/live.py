"""`mpwatch attach` and `mpwatch ctl`: clients of a live run's control socket, here or on
another machine through `ssh HOST mpwatch bridge` (sources.remote.client). `ctl logs` alone
reads the run directory (so it works on finished runs too), with --host it asks the live
run; `attach` on a run that has ended replays its files (cli.show). Main thread."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from mpwatch.cli.args import ACTIONS, Parser, die
from mpwatch.cli.ctl_args import ctl_parser
from mpwatch.text import safe

if TYPE_CHECKING:  # the client modules load lazily: `ctl logs` needs none of them
    from mpwatch.settings import Settings
    from mpwatch.sources.local import Requests

REMOTE_HELP = ("the mpwatch command on the other machine, where a non-interactive ssh shell "
               "does not find it (default: mpwatch)")


def cmd_attach(argv: list[str], settings: Settings) -> int:
    p = Parser(prog="mpwatch attach", description=(
        "Open the TUI on a live run, here or on other machines over ssh (HOST:RUN). Attaching to one "
        "node of a multi-node run opens every node; a run that has ended opens as with 'mpwatch show'."))
    p.add_argument("targets", nargs="*", metavar="RUN | HOST:RUN",
                   help="a run id or directory here; HOST:RUN (HOST: for the newest) on another machine")
    p.add_argument("--remote-mpwatch", metavar="PATH", help=REMOTE_HELP)
    p.add_argument("--no-mouse", action="store_true")
    ns = p.parse_args(argv)
    from mpwatch.sources.remote.client import parse_target

    remote = [t for t in ns.targets if parse_target(t) is not None]
    if not ns.targets and not ns.remote_mpwatch:
        picked = _pick(ns.no_mouse, settings)
        if isinstance(picked, int):
            return picked
        ns.targets = [picked] if picked is not None else []
    if len(ns.targets) > 1 or remote or ns.remote_mpwatch:
        from mpwatch.cli.attach_nodes import attach_nodes

        return attach_nodes(ns.targets, ns.remote_mpwatch, settings, mouse=not ns.no_mouse)
    from mpwatch.sources.local import Client, ClientError

    try:
        client = Client.connect(ns.targets[0] if ns.targets else None, settings.tmpdir)
    except ClientError as exc:
        from mpwatch.cli.show import ended_run_dir, show

        ended = ended_run_dir(ns.targets[0] if ns.targets else None, settings)
        return show(ended, settings, mouse=not ns.no_mouse) if ended is not None else die(str(exc))
    from mpwatch.cli.attach_nodes import has_peers

    if has_peers(client):  # one node of a multi-node run: show them all
        client.close()
        from mpwatch.cli.attach_nodes import attach_nodes

        return attach_nodes([str(client.handle.run_dir)], None, settings, mouse=not ns.no_mouse)
    try:
        from mpwatch.cli.tui_launch import attach_tui
    except ImportError:
        client.close()
        return die("the TUI is not installed (pip install textual); use 'mpwatch ctl status'")
    code: int = attach_tui(client, settings, mouse=not ns.no_mouse)
    return code


def _pick(no_mouse: bool, settings: Settings) -> str | int | None:
    """`attach` without RUN: the only live run, or the one the user picks among several (a
    screen of their own: never the newest by chance); an exit code when the user left."""
    from mpwatch.rundir import registry

    entries = registry.live_runs(settings.tmpdir)
    if len(entries) <= 1:
        return entries[0]["run_id"] if entries else None
    try:
        from mpwatch.tui.picker import RunPicker
    except ImportError:
        from mpwatch.cli.which_run import refusal

        print(refusal(entries, "attach to", how=f"(e.g. mpwatch attach {entries[0]['run_id']})"),
              file=sys.stderr)
        return 2
    chosen = RunPicker(entries).run(mouse=not no_mouse)
    if chosen is None:
        print("mpwatch: no run chosen; nothing attached", file=sys.stderr)
        return 0
    return chosen


def _ctl_parser() -> Parser:
    p = ctl_parser()
    p.add_argument("--host", metavar="HOST", help="the run is on HOST: reach it with ssh (mpwatch bridge)")
    p.add_argument("--remote-mpwatch", metavar="PATH", help=REMOTE_HELP)
    return p


def _connect(run: str | None, host: str | None, remote_mpwatch: str | None, settings: Settings) -> Requests:
    if host is None:
        from mpwatch.sources.local import Client

        return Client.connect(run, settings.tmpdir)
    from mpwatch.sources.remote.client import RemoteClient, Target, Transport

    return RemoteClient(Target(host, run), Transport.from_settings(settings, remote_mpwatch))


def _which(ns: argparse.Namespace, argv: list[str], settings: Settings) -> str | None:
    """The run a ctl command without --run means (cli.which_run); raises SeveralRuns or ClientError."""
    from mpwatch.cli.which_run import choose

    if ns.host is None:
        from mpwatch.rundir import registry

        if ns.action == "set":  # the example names a run that declares the tunable
            return choose(ns.action, registry.live_runs(settings.tmpdir), argv=argv,
                          fits=lambda e: _declares(e["run_dir"], ns.name),
                          unfit=f"no live run here declares a tunable {safe.printable(ns.name, 64)}")
        return choose(ns.action, registry.live_runs(settings.tmpdir), argv=argv)
    from mpwatch.sources.remote.client import Transport, remote_runs

    transport = Transport.from_settings(settings, ns.remote_mpwatch)
    return choose(ns.action, remote_runs(ns.host, transport), f" on {ns.host}", argv=argv)


def _declares(run_dir: str, name: str) -> bool:
    """The live run's status names the tunable (False where it cannot be asked)."""
    from mpwatch.sources.local import Client, ClientError

    try:
        with Client.at(run_dir) as client:
            return any(t["name"] == name for t in client.status(tail=0).get("tunables") or [])
    except (ClientError, OSError):
        return False


def cmd_ctl(argv: list[str], settings: Settings) -> int:
    ns = _ctl_parser().parse_args(argv)
    if ns.remote_mpwatch and not ns.host:
        return die("--remote-mpwatch goes with --host")
    if ns.run is None:
        from mpwatch.cli.which_run import SeveralRuns
        from mpwatch.rundir.registry import RunError
        from mpwatch.sources.local import ClientError

        try:
            ns.run = _which(ns, argv, settings)
        except SeveralRuns as exc:
            print(exc, file=sys.stderr)
            return 2
        except (ClientError, RunError) as exc:
            return die(str(exc))
    if ns.action == "logs" and ns.host is None:
        from mpwatch.cli.logs import show_logs

        return show_logs(ns.run, ns.rank, "stderr" if ns.stderr else "stdout", ns.lines, ns.follow, settings)
    if ns.action == "logs" and ns.follow:
        return die("--follow reads the run directory: run it there "
                   f"(ssh {ns.host} mpwatch ctl logs ... --follow)")
    from mpwatch.sources.local import ClientError

    try:
        client = _connect(ns.run, ns.host, ns.remote_mpwatch, settings)
    except ClientError as exc:
        return die(str(exc))
    try:
        _ctl_action(client, ns)
    except ClientError as exc:
        return die(str(exc))
    finally:
        client.close()
    return 0


def _ctl_action(client: Requests, ns: argparse.Namespace) -> None:
    from mpwatch.sources.local import who

    if ns.action == "status":
        st = client.status()
        if ns.json:
            print(json.dumps(st, indent=1, default=str))
        else:
            from mpwatch.cli.status_text import status_lines

            print(safe.text(status_lines(st)))
    elif ns.action in ACTIONS:
        print(safe.text(client.act(ns.action, ns.target)))
    elif ns.action == "resize":
        print(safe.text(client.resize(ns.n)))
    elif ns.action == "stop":
        print(safe.text(client.stop()))
    elif ns.action in ("checkpoint", "memory"):
        print(safe.text(client.ask(ns.action, ns.target, ns.at_step, who("ctl"))["message"]))
    elif ns.action == "profile":
        print(safe.text(client.ask("profile", ns.target, ns.at_step, who("ctl"), steps=ns.steps)["message"]))
    elif ns.action == "set":
        print(safe.text(client.set_tunable(ns.name, ns.value, ns.at_step, who("ctl"))["message"]))
    elif ns.action == "logs":
        lines = client.logs(ns.rank, "stderr" if ns.stderr else "stdout", ns.lines)
        sys.stdout.write("".join(safe.printable(ln) + "\n" for ln in lines))
