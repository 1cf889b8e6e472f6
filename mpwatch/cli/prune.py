"""`mpwatch prune [--keep N] [--older-than DAYS] [--dry-run] [DIR...]`: remove old run
directories of this user from the runs folder (rundir.layout) and the folders given. A run goes when it
is not among the N newest (with --keep) and started more than DAYS ago (with
--older-than); a live run never goes, nor anything that is no run directory, nor
another user's. Says what it removed (or would, with --dry-run). Main thread."""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from mpwatch.cli.args import Parser, UsageError, count, days, die, note, say
from mpwatch.rundir import layout, postmortem, reader, registry, runs_folder
from mpwatch.settings import Settings
from mpwatch.text import fmt

DAY_S = 86400.0


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _candidates(folder: Path) -> list[postmortem.RunListing]:
    """This user's runs in a folder, newest first (live ones included: they count in --keep)."""
    uid = os.getuid()
    out: list[postmortem.RunListing] = []
    unreadable: list[Path] = []
    for d in registry.run_dirs(folder, unreadable):
        try:
            if d.stat().st_uid != uid:
                continue
            out.append(postmortem.listing(reader.read(d), exits=[]))
        except (OSError, reader.NotARunDir):
            continue
    if unreadable:
        note(registry.unreadable_note(unreadable))
    out.sort(key=lambda r: r["started"] or 0.0, reverse=True)
    return out


def _remove(path: Path) -> list[str]:
    """rmtree that never follows a link out of the run and says what it could not remove."""
    errors: list[str] = []
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=lambda _fn, p, exc: errors.append(f"{p}: {exc}"))
    else:
        shutil.rmtree(path, onerror=lambda _fn, p, exc: errors.append(f"{p}: {exc[1]}"))
    return errors


def _ago(seconds: float) -> str:
    return f"{seconds / DAY_S:.1f} days ago" if seconds >= DAY_S else fmt.duration(seconds) + " ago"


def doomed(runs: list[postmortem.RunListing], keep: int | None, older_than: float | None,
           now: float) -> list[postmortem.RunListing]:
    """Which of a folder's runs (newest first) go: past the newest `keep`, started more than
    `older_than` days ago, and not live. A run of unknown start (no readable run.json nor
    first event: one starting this instant looks so) is kept. Pure."""
    out = []
    for i, r in enumerate(runs):
        started = r["started"]
        if r["live"] or started is None or (keep is not None and i < keep):
            continue
        if older_than is not None and now - started <= older_than * DAY_S:
            continue
        out.append(r)
    return out


def cmd_prune(argv: list[str], settings: Settings) -> int:
    p = Parser(prog="mpwatch prune",
               description="Remove old run directories of this user (never a live one).")
    p.add_argument("--keep", type=count, metavar="N", help="keep the N newest runs of each folder")
    p.add_argument("--older-than", type=days, metavar="DAYS",
                   help="remove only runs started more than DAYS ago")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.add_argument("folders", nargs="*", metavar="DIR",
                   help=f"runs folders (default: ./{layout.RUNS_FOLDER})")
    ns = p.parse_args(argv)
    if ns.keep is None and ns.older_than is None:
        raise UsageError("say what to remove: --keep N, --older-than DAYS, or both")
    folders = [Path(f) for f in ns.folders] or [registry.DEFAULT_RUNS]
    if not ns.folders and os.path.lexists(registry.DEFAULT_RUNS):
        try:  # a name anyone may have made first: a link to another's runs is never pruned through
            runs_folder.check_own_runs_folder(registry.DEFAULT_RUNS)
        except OSError as exc:
            return die(f"not pruning {registry.DEFAULT_RUNS}: {exc.strerror}")
    for f in folders:
        if not f.is_dir():
            return die(f"no such folder: {f}")
    now = time.time()
    removed = freed = failed = 0
    verb = "would remove" if ns.dry_run else "removed"
    for folder in folders:
        for r in doomed(_candidates(folder), ns.keep, ns.older_than, now):
            path = Path(r["run_dir"])
            size = _size(path)
            age = _ago(now - (r["started"] or now))
            if not ns.dry_run:
                errors = _remove(path)
                if errors:
                    failed += 1
                    say(f"could not remove all of {path}: {errors[0]}")
                    continue
            removed += 1
            freed += size
            say(f"{verb} {path} (run {r['run_id']}, started {age}, {fmt.size_long(size)})")
    print(f"{verb} {removed} run(s), {fmt.size_long(freed)}"
          + (f"; {failed} could not be removed" if failed else ""))
    return 1 if failed else 0
