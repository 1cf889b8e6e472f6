"""`mpwatch prune`: removes old run directories of this user, never a live run, nor
anything that is no run, nor another user's; says what it removed; --dry-run removes
nothing. The runs are copies of a real one, their start moved back in time."""
from __future__ import annotations

import json
import os
import time

import pytest

from mpwatch.cli.prune import doomed
from tests.helpers import FIXTURES, HeadlessRun, mpwatch, one_line_error

pytestmark = pytest.mark.timeout(300)
DAY = 86400.0


def aged(recorded, folder, name: str, days: float):
    d = recorded.copy(folder, name)
    info = json.loads((d / "run.json").read_text())
    info["started"] = time.time() - days * DAY
    (d / "run.json").write_text(json.dumps(info))
    return d


@pytest.fixture
def folder(crashed, killed, tmp_path):
    """Four ended runs 1, 3, 5 and 8 days old (one cut short), a live run and a stray folder."""
    f = tmp_path / "runs"
    f.mkdir()
    for name, days in (("d1", 1), ("d3", 3), ("d8", 8)):
        aged(crashed, f, name, days)
    aged(killed, f, "d5-cut-short", 5)
    (f / "notes").mkdir()
    (f / "notes" / "todo.txt").write_text("not a run")
    live = HeadlessRun(f, FIXTURES / "forever.py", n=1)  # its directory: runs/run, started now
    live.start()
    yield f
    live.cleanup()


def names(folder) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_dir()}


def test_dry_run_says_and_removes_nothing(folder):
    before = names(folder)
    res = mpwatch("prune", "--keep", "0", "--dry-run", folder)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert sorted(ln.split()[2].rsplit("/", 1)[1] for ln in lines[:-1]) == ["d1", "d3", "d5-cut-short", "d8"]
    assert all(ln.startswith("would remove ") for ln in lines)
    assert lines[-1].startswith("would remove 4 run(s), ")
    assert names(folder) == before


def test_keep_spares_the_newest_and_every_live_run(folder):
    res = mpwatch("prune", "--keep", "2", folder)
    assert res.returncode == 0, res.stderr
    # Newest first: the live run (kept, and counted), d1; then d3, d5, d8 go.
    assert names(folder) == {"run", "d1", "notes"}
    assert res.stdout.splitlines()[-1].startswith("removed 3 run(s), ")
    assert f"removed {folder / 'd8'} (run " in res.stdout and "started 8.0 days ago" in res.stdout
    res = mpwatch("prune", "--keep", "0", folder)
    assert names(folder) == {"run", "notes"}, "a live run is never removed"
    assert (folder / "notes" / "todo.txt").exists()


def test_older_than_and_keep_together(folder):
    res = mpwatch("prune", "--older-than", "4", folder)
    assert res.returncode == 0 and names(folder) == {"run", "d1", "d3", "notes"}
    mpwatch("prune", "--older-than", "0.5", "--keep", "2", folder)
    assert names(folder) == {"run", "d1", "notes"}


@pytest.mark.root("giving a run directory to uid 65534")
def test_the_default_folder_and_another_users_runs(crashed, tmp_path):
    runs = tmp_path / "mpwatch-runs"
    runs.mkdir()
    aged(crashed, runs, "mine", 9)
    theirs = aged(crashed, runs, "theirs", 9)
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)
    elif theirs.stat().st_uid == os.getuid():
        pytest.skip("cannot give a directory to another user without root")
    res = mpwatch("prune", "--older-than", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert names(runs) == {"theirs"} and "removed mpwatch-runs/mine" in res.stdout


@pytest.mark.parametrize("args,words", [
    ([], "say what to remove: --keep N, --older-than DAYS, or both"),
    (["--keep", "-1"], "must not be negative"),
    (["--keep", "few"], "expected a whole number"),
    (["--older-than", "soon"], "expected a number of days, got 'soon'"),
    (["--older-than", "-2"], "must be a non-negative number of days"),
    (["--older-than", "nan"], "must be a non-negative number of days"),
    (["--keep", "1", "/no/such/folder"], "no such folder: /no/such/folder"),
])
def test_bad_prune_arguments(tmp_path, args, words):
    one_line_error(mpwatch("prune", *args, cwd=tmp_path), words)


def test_what_goes_is_decided_purely():
    now = 100 * DAY

    def r(days, live=False):
        return {"started": now - days * DAY if days is not None else None, "live": live, "run_id": str(days)}
    runs = [r(0, live=True), r(1), r(2), r(9), r(None)]  # as listed: newest first, unknown last
    assert [x["run_id"] for x in doomed(runs, keep=2, older_than=None, now=now)] == ["2", "9"]
    assert [x["run_id"] for x in doomed(runs, keep=None, older_than=1.5, now=now)] == ["2", "9"]
    assert [x["run_id"] for x in doomed(runs, keep=3, older_than=1.5, now=now)] == ["9"]
    assert doomed(runs, keep=0, older_than=100, now=now) == []
