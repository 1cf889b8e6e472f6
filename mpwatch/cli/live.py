"""`mpwatch attach` and `mpwatch ctl`: clients of a live run's control socket. `ctl logs`
alone reads the run directory (so it works on finished runs too), and `attach` on a run
that has ended replays its files (cli/show.py). Main thread."""
from __future__ import annotations

import json

from mpwatch.cli.args import ACTIONS, Parser, ctl_parser, die


def cmd_attach(argv: list[str]) -> int:
    p = Parser(prog="mpwatch attach", description="Open the TUI on a live run (a run that has ended opens "
                                                   "as with 'mpwatch show').")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or directory (default: the newest)")
    p.add_argument("--no-mouse", action="store_true")
    ns = p.parse_args(argv)
    from mpwatch.client import Client, ClientError

    try:
        client = Client.connect(ns.run)
    except ClientError as exc:
        from mpwatch.cli.show import ended_run_dir, show

        ended = ended_run_dir(ns.run)
        return show(ended, mouse=not ns.no_mouse) if ended is not None else die(str(exc))
    try:
        from mpwatch.tui.launch import attach_tui
    except ImportError:
        client.close()
        return die("the TUI is not installed (pip install textual); use 'mpwatch ctl status'")
    code: int = attach_tui(client, mouse=not ns.no_mouse)
    return code


def cmd_ctl(argv: list[str]) -> int:
    ns = ctl_parser().parse_args(argv)
    if ns.action == "logs":
        from mpwatch.cli.logs import show_logs

        return show_logs(ns.run, ns.rank, "stderr" if ns.stderr else "stdout", ns.lines, ns.follow)
    from mpwatch.client import Client, ClientError

    try:
        with Client.connect(ns.run) as client:
            if ns.action == "status":
                st = client.status()
                if ns.json:
                    print(json.dumps(st, indent=1, default=str))
                else:
                    from mpwatch.cli.status_text import status_lines

                    print("\n".join(status_lines(st)))
            elif ns.action in ACTIONS:
                print(client.act(ns.action, ns.target))
            elif ns.action == "resize":
                print(client.resize(ns.n))
            elif ns.action == "stop":
                print(client.stop())
    except ClientError as exc:
        return die(str(exc))
    return 0
