"""The default runs folder, ./mpwatch-runs, against another user (issue 30, items 5 and 11). In a
folder every user may write in (sticky, as /tmp), another user makes `mpwatch-runs` first: a
link to a folder of the victim's (with runs in it), or a folder anyone may write in. A run and
`prune` there refuse it in one line and touch nothing behind it; the victim is root, and uid
65534 too (a run of nobody's is refused before it starts a process). Under `umask 000` a run in
a fresh folder makes ./mpwatch-runs 0755 itself, and starts."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from tests.faults.conftest import NOBODY, as_user
from tests.faults.hostile import as_nobody, needs_root, no_traceback, nobody_env, shared_folder
from tests.helpers import FIXTURES, MPWATCH, mpwatch, one_line_error

pytestmark = pytest.mark.timeout(300)
REPORTER = FIXTURES / "reporter.py"


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _victims_runs(d, uid: int):
    """A folder of the victim's holding a (finished) run of theirs, as a run directory looks."""
    theirs = d / "victims"
    run = theirs / "20200101-000000-train-deadbeef"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"run_id": "20200101-000000-train-deadbeef", "started": 1577836800, '
                                  '"finished": 1577836900, "exit_code": 0}')
    for p in (theirs, run, run / "run.json"):
        os.chown(p, uid, uid)
    theirs.chmod(0o700)
    return theirs


@needs_root
def test_a_runs_folder_link_planted_by_another_user_is_refused_by_run_and_prune():
    with shared_folder() as d:
        theirs = _victims_runs(d, 0)
        before = sorted(os.listdir(theirs))
        as_user(lambda: os.symlink(theirs, d / "mpwatch-runs"))
        res = mpwatch("--headless", "-n", "1", REPORTER, "3", cwd=d)
        one_line_error(res, f"{d / 'mpwatch-runs'} is a link (never followed)")
        prune = mpwatch("prune", "--keep", "0", "--dry-run", cwd=d)
        one_line_error(prune, "not pruning mpwatch-runs: mpwatch-runs is a link (never followed)")
        prune = mpwatch("prune", "--keep", "0", cwd=d)
        one_line_error(prune, "is a link (never followed)")
        assert sorted(os.listdir(theirs)) == before


@needs_root
def test_a_runs_folder_others_may_write_in_is_refused():
    with shared_folder() as d:
        runs = d / "mpwatch-runs"
        runs.mkdir()
        runs.chmod(0o1777)  # root's, but anyone may add to it (made under umask 000 by an older mpwatch)
        res = mpwatch("--headless", "-n", "1", REPORTER, "3", cwd=d)
        one_line_error(res, f"other users may write in {runs} (chmod go-w it, or remove it)")
        one_line_error(mpwatch("prune", "--keep", "0", "--dry-run", cwd=d), "other users may write in")
        assert os.listdir(runs) == []


@needs_root
def test_as_another_user_a_planted_runs_folder_link_is_refused_too():
    """The victim is uid 65534; the one who plants the link is root."""
    with shared_folder() as d:
        home = d / "home"
        home.mkdir()
        env = nobody_env(home)
        theirs = _victims_runs(d, NOBODY)
        before = sorted(os.listdir(theirs))
        os.symlink(theirs, d / "mpwatch-runs")
        script = home / "train.py"
        shutil.copy(REPORTER, script)
        os.chown(script, NOBODY, NOBODY)
        res = as_nobody("--headless", "-n", "1", script, "3", cwd=d, env=env)
        one_line_error(res, "mpwatch-runs is a link (never followed)")
        for dry in (["--dry-run"], []):
            prune = as_nobody("prune", "--keep", "0", *dry, cwd=d, env=env)
            one_line_error(prune, "not pruning mpwatch-runs: mpwatch-runs is a link (never followed)")
            no_traceback(prune)
        assert sorted(os.listdir(theirs)) == before


def test_under_umask_000_a_run_starts_in_a_fresh_folder(tmp_path):
    res = subprocess.run(["sh", "-c", 'umask 000 && exec "$@"', "sh", *MPWATCH, "--headless", "-n", "1",
                          str(REPORTER), "3"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    runs = tmp_path / "mpwatch-runs"
    assert mode(runs) == 0o755
    (run,) = runs.iterdir()
    assert mode(run) == 0o700 and "rank 0 done" in (run / "rank-0" / "stdout.log").read_text()
    assert all(mode(p) & 0o077 == 0 for p in run.rglob("*") if not p.is_symlink()), \
        {str(p): oct(mode(p)) for p in run.rglob("*")}
