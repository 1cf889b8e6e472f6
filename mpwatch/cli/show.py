"""`mpwatch show RUN`: the TUI, read-only, on a run directory, live or finished, from its
files alone (sources.replay), with a time cursor; and the way `mpwatch attach` opens a run
that has ended. Main thread."""
from __future__ import annotations

from pathlib import Path

from mpwatch.cli.args import Parser, die
from mpwatch.rundir import reader, registry
from mpwatch.settings import Settings


def cmd_show(argv: list[str], settings: Settings) -> int:
    p = Parser(prog="mpwatch show", description="Open the TUI on a run's files, live or finished, and step "
                                                "through what happened (read-only).")
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run id (see 'mpwatch ls --all') or a run directory (default: the newest run)")
    p.add_argument("--no-mouse", action="store_true")
    ns = p.parse_args(argv)
    try:
        path = registry.find_run_dir(ns.run, settings.tmpdir)
    except registry.RunError as exc:
        return die(str(exc))
    return show(path, settings, mouse=not ns.no_mouse)


def show(path: Path, settings: Settings, mouse: bool = True) -> int:
    """Replay the run directory at `path` in the TUI; 2 (and one line) when it is none."""
    try:
        from mpwatch.sources.replay import ReplaySource

        source = ReplaySource(path)
    except reader.NotARunDir as exc:
        return die(str(exc))
    try:
        from mpwatch.tui.render import glyphs
        from mpwatch.tui.replay_app import ReplayApp
    except ImportError:
        return die(f"the TUI is not installed (pip install textual); use 'mpwatch summary {path}'")
    ReplayApp(source, glyphs=glyphs.pick(ascii_only=settings.ascii)).run(mouse=mouse)
    return 0


def ended_run_dir(run: str | None, settings: Settings) -> Path | None:
    """The directory of RUN when it names a run that has ended (finished, or cut short by
    its supervisor's death), else None. `attach` opens such a run with `show`."""
    if run is None:
        return None
    try:
        rd = reader.read(registry.find_run_dir(run, settings.tmpdir))
    except (registry.RunError, reader.NotARunDir):
        return None
    return None if rd.live() else rd.path
