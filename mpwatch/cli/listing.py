"""`mpwatch ls [--json] [--all [DIR...]]`: live runs of this user from the registry; with
--all also the runs in the runs folder (rundir.layout) and the folders given, newest first, with how each
ended. `ls --host HOST`: the live runs of the ssh user there (through `mpwatch bridge
--ls`). Main thread."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mpwatch.cli.args import Parser, die, note, say
from mpwatch.rundir import layout, postmortem, reader, registry
from mpwatch.settings import Settings
from mpwatch.text import fmt
from mpwatch.text.run_end import run_end


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def all_runs(folders: list[Path], tmpdir: Path) -> list[postmortem.RunListing]:
    """Live runs (wherever their directory is) and every run in `folders`, newest first;
    a folder that is itself a run directory counts as one run."""
    dirs: dict[Path, Path] = {}
    for e in registry.live_runs(tmpdir):
        dirs.setdefault(Path(e["run_dir"]).resolve(), Path(e["run_dir"]))
    unreadable: list[Path] = []
    for folder in folders:
        for d in [folder] if reader.looks_like_run(folder) else registry.run_dirs(folder, unreadable):
            dirs.setdefault(d.resolve(), d)
    if unreadable:
        note(registry.unreadable_note(unreadable))
    out: list[postmortem.RunListing] = []
    for d in dirs.values():
        try:
            out.append(postmortem.listing(reader.read(d)))
        except reader.NotARunDir:
            continue  # removed while we looked, or not readable by this user
    out.sort(key=lambda r: r["started"] or 0.0, reverse=True)
    return out


def ended_text(r: postmortem.RunListing) -> str:
    """How a run ended, in a few words (text.run_end's, the TUI's too), or 'live'."""
    if r["ending"] == "live":
        return "live"
    f = r["first_failure"]
    return run_end(r["exit_code"], stopped=r.get("stopped"), cut_short=r["ending"] == "cut short",
                   failure=None if f is None else (f["rank"], f["cause"] or f["error"] or "failed"))


def _print_all(rows: list[postmortem.RunListing]) -> None:
    if not rows:
        print("no runs (none live, none in the folders looked at)")
        return
    print(f"{'RUN':36} {'STARTED':19}  {'TOOK':>9}  {'WORKERS':>7}  {'ENDED':40}  DIR")
    for r in rows:
        say(f"{r['run_id']:36} {_when(r['started']):19}  {fmt.duration(r['duration']):>9}  "
              f"{r['nprocs'] if r['nprocs'] is not None else '?':>7}  {cut(ended_text(r), 40):40}  "
              f"{r['run_dir']}")


def cut(text: str, width: int) -> str:
    """At most `width` characters, an ellipsis where text was cut."""
    return text if len(text) <= width else text[:width - 1] + "…"


def cmd_ls(argv: list[str], settings: Settings) -> int:
    p = Parser(prog="mpwatch ls", description="List live runs of this user; with --all, finished ones too.")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true",
                   help=f"also finished runs, in ./{layout.RUNS_FOLDER} and the folders given")
    p.add_argument("folders", nargs="*", metavar="DIR", help="runs folders to look in (with --all)")
    p.add_argument("--host", metavar="HOST", help="the live runs of the ssh user on HOST (mpwatch bridge)")
    p.add_argument("--remote-mpwatch", metavar="PATH",
                   help="the mpwatch command on HOST, where a non-interactive ssh shell does not find it")
    ns = p.parse_args(argv)
    if ns.host is not None or ns.remote_mpwatch:
        return _ls_host(ns, settings)
    if ns.folders and not ns.all:
        return die("folders are looked in with --all only (mpwatch ls --all DIR...)")
    for f in ns.folders:
        if not Path(f).is_dir():
            return die(f"no such folder: {f}")
    try:
        if ns.all:
            rows = all_runs([registry.DEFAULT_RUNS, *map(Path, ns.folders)], settings.tmpdir)
            if ns.json:
                print(json.dumps(rows, indent=1))
            else:
                _print_all(rows)
            return 0
        entries = registry.live_runs(settings.tmpdir)
    except registry.RunError as exc:
        return die(str(exc))
    return _print_live(entries, ns.json)


def _ls_host(ns: argparse.Namespace, settings: Settings) -> int:
    if ns.host is None:
        return die("--remote-mpwatch goes with --host")
    if ns.all or ns.folders:
        return die(f"--all reads run folders on this machine; for {ns.host}'s: "
                   f"ssh {ns.host} mpwatch ls --all")
    from mpwatch.sources.local import ClientError
    from mpwatch.sources.remote.client import Transport, remote_runs

    try:
        entries = remote_runs(ns.host, Transport.from_settings(settings, ns.remote_mpwatch))
    except ClientError as exc:
        return die(str(exc))
    return _print_live(entries, ns.json, f" on {ns.host}")


def _print_live(entries: list[registry.RegistryEntry], as_json: bool, where: str = "") -> int:
    if as_json:
        print(json.dumps(entries, indent=1))
        return 0
    if not entries:
        say(f"no live runs{where}")
        return 0
    print(f"{'RUN':40} {'PID':>7} {'WORKERS':>7}  {'STARTED':19}  DIR")
    for e in entries:
        say(f"{e['run_id']:40} {e['pid']:>7} {e['nprocs']:>7}  {_when(e['started']):19}  {e['run_dir']}")
    return 0
