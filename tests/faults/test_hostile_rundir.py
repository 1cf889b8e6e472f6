"""Parallel launches and hostile neighbours against the run directory and the registry
(issue 22, items 0, 1 and 10; issue 19's registry PermissionErrors): each run claims its own
id and directory atomically, nothing planted by another user is ever followed or re-moded,
and another user's runs are skipped with a note, never a traceback."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpwatch.cli.args import run_parser
from mpwatch.cli.launch import options
from mpwatch.cli.tui_launch import supervisor_argv
from mpwatch.rundir import claim, writer
from mpwatch.settings import Settings
from tests.faults.conftest import NOBODY, as_user
from tests.faults.hostile import as_nobody, needs_root, no_traceback, nobody_env, shared_folder
from tests.helpers import FIXTURES, MPWATCH, mpwatch, one_line_error

pytestmark = pytest.mark.timeout(300)

REPORTER = FIXTURES / "reporter.py"
RUN_ID = re.compile(r"^\d{8}-\d{6}-reporter-[0-9a-f]{8}$")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_parallel_launches_in_one_folder_each_get_a_run_of_their_own(tmp_path):
    """A sweep's `for lr in ...; do mpwatch ... & done`: four runs started together, four
    directories, four registry entries, each events.jsonl holding one run."""
    env = dict(os.environ, STEPS="5", SLEEP="0.02")
    procs = [subprocess.Popen([*MPWATCH, "--headless", "-n", "1", str(REPORTER)], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for _ in range(4)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    dirs = sorted((tmp_path / "mpwatch-runs").iterdir())
    assert len(dirs) == 4, dirs
    ids = set()
    for d in dirs:
        info = json.loads((d / "run.json").read_text())
        assert info["run_id"] == d.name and RUN_ID.match(d.name), d.name
        ids.add(info["run_id"])
        events = [json.loads(ln)["event"] for ln in (d / "events.jsonl").read_text().splitlines()]
        assert events.count("run_started") == 1 and events.count("run_finished") == 1, (d, events)
        assert (d / "rank-0" / "stdout.log").read_text().count("rank 0 done") == 1
    assert len(ids) == 4


def test_a_run_id_cannot_be_claimed_twice(tmp_path):
    first = claim.claim("train.py", 1, str(tmp_path), Settings().tmpdir, run_id="fixed-id")
    try:
        with pytest.raises(claim.registry.RunError, match="run id fixed-id is taken by a live run"):
            claim.claim("train.py", 1, str(tmp_path), Settings().tmpdir, run_dir=tmp_path / "other",
                        run_id="fixed-id")
        assert not (tmp_path / "other").exists()
    finally:
        first.release()


def test_a_name_taken_in_the_runs_folder_moves_the_claim_to_the_next_id(tmp_path, monkeypatch):
    """Whatever already sits at the id's name (a planted link, another run's directory) is
    never used: the claim takes the next id."""
    ids = iter(["20300101-000000-train-aaaaaaaa", "20300101-000000-train-bbbbbbbb"])
    monkeypatch.setattr(claim.registry, "new_run_id", lambda script: next(ids))
    runs = tmp_path / "mpwatch-runs"
    runs.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (runs / "20300101-000000-train-aaaaaaaa").symlink_to(tmp_path / "elsewhere")
    taken = claim.claim("train.py", 1, str(tmp_path), Settings().tmpdir)
    try:
        assert taken.run_id == "20300101-000000-train-bbbbbbbb"
        assert not (runs / taken.run_id).is_symlink() and mode(runs / taken.run_id) == 0o700
        assert list((tmp_path / "elsewhere").iterdir()) == []
    finally:
        taken.release()


@needs_root
def test_links_planted_by_another_user_are_never_followed():
    """A runs folder every user may write in (sticky, as /tmp), named with --log-dir (the default
    ./mpwatch-runs must be this user's alone: test_hostile_runs_folder): another user plants
    `<time>-<script>` links for the coming minute, pointing at a folder of theirs whose
    rank-0/stdout.log points at a root-only file. Root's run goes elsewhere, touches neither."""
    with shared_folder() as d:
        runs = d / "mpwatch-runs"
        runs.mkdir(mode=0o1777)
        runs.chmod(0o1777)
        secret = d / "secret"
        secret.write_text("root only\n")
        secret.chmod(0o600)
        target = d / "theirs"

        def plant():
            target.mkdir()
            target.chmod(0o777)
            (target / "rank-0").mkdir()
            (target / "rank-0" / "stdout.log").symlink_to(secret)
            now = int(time.time())
            for t in range(now - 2, now + 90):
                base = time.strftime("%Y%m%d-%H%M%S", time.localtime(t)) + "-reporter"
                for name in [base] + [f"{base}-{n}" for n in range(2, 5)]:
                    os.symlink(target, runs / name)
            return len(os.listdir(runs))
        planted = as_user(plant)
        res = mpwatch("--headless", "-n", "1", "--log-dir", runs, REPORTER, "3", cwd=d)
        assert res.returncode == 0, res.stderr
        assert secret.read_text() == "root only\n" and mode(target) == 0o777
        assert sorted(p.name for p in target.iterdir()) == ["rank-0"] and os.lstat(target).st_uid == NOBODY
        mine = [p for p in runs.iterdir() if not p.is_symlink()]
        assert len(mine) == 1 and len(os.listdir(runs)) == planted + 1
        assert RUN_ID.match(mine[0].name) and mode(mine[0]) == 0o700 and os.lstat(mine[0]).st_uid == 0
        assert "rank 0 done" in (mine[0] / "rank-0" / "stdout.log").read_text()


@needs_root
def test_a_runs_folder_of_another_user_is_refused():
    with shared_folder() as d:
        def theirs():
            os.mkdir(d / "mpwatch-runs")
            os.chmod(d / "mpwatch-runs", 0o777)
        as_user(theirs)
        res = mpwatch("--headless", "-n", "1", REPORTER, "3", cwd=d)
        one_line_error(res, f"belongs to another user (uid {NOBODY})")
        assert os.listdir(d / "mpwatch-runs") == []


def test_run_dir_on_a_folder_others_may_write_in_is_refused_and_keeps_its_mode():
    """`--run-dir` at a shared temp folder: never re-moded (it keeps its sticky bit), never used."""
    with shared_folder() as d:
        one_line_error(mpwatch("--headless", "-n", "1", "--run-dir", d, REPORTER, "3", cwd=d),
                       "other users may write in it")
        assert mode(d) == 0o1777 and os.listdir(d) == []
        (d / "x").write_text("")
        one_line_error(mpwatch("--headless", "-n", "1", "--run-dir", d, REPORTER, "3", cwd=d), "is not empty")
        assert mode(d) == 0o1777 and os.listdir(d) == ["x"]


def test_run_dir_with_an_old_events_file_is_refused(tmp_path):
    """An old run's events.jsonl (its run.json gone) is never appended to: a summary would
    mix the two runs."""
    old = tmp_path / "old"
    old.mkdir(mode=0o700)
    line = json.dumps({"ts": 1.0, "event": "run_started", "rank": None, "nprocs": 2})
    (old / "events.jsonl").write_text(line + "\n")
    one_line_error(mpwatch("--headless", "-n", "1", "--run-dir", old, REPORTER, "3", cwd=tmp_path),
                   "already holds a run")
    assert (old / "events.jsonl").read_text() == line + "\n" and os.listdir(old) == ["events.jsonl"]


def test_run_dir_on_an_empty_folder_of_ours_is_used_as_it_is(tmp_path):
    """Its mode stays what the user gave it; every file inside is the owner's alone."""
    d = tmp_path / "mine"
    d.mkdir()
    d.chmod(0o750)
    res = mpwatch("--headless", "-n", "1", "--run-dir", d, REPORTER, "3", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert mode(d) == 0o750
    files = [p for p in d.rglob("*") if p.is_file()]
    assert files and all(mode(p) == 0o600 for p in files), {str(p): oct(mode(p)) for p in files}
    assert all(mode(p) == 0o700 for p in d.rglob("*") if p.is_dir())


def test_run_dir_that_is_a_link_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    one_line_error(mpwatch("--headless", "-n", "1", "--run-dir", tmp_path / "link", REPORTER, cwd=tmp_path),
                   "is a link or not a directory")
    assert os.listdir(tmp_path / "real") == []


def test_the_supervisor_takes_only_the_directory_its_launcher_made(tmp_path):
    """The TUI's launch makes the run directory, then starts the supervisor on it: a directory
    swapped in at that path meanwhile is refused, not used."""
    ns = run_parser().parse_args(["-n", "1", str(REPORTER), "3"])
    opts = options(ns, os.environ)
    taken = claim.claim(opts.script, 1, str(tmp_path), Settings().tmpdir, tmp_path / "run", "launched")
    with writer.open_supervisor_log(taken.fd) as out:
        out.write(b"launched\n")
    argv = supervisor_argv(ns, opts, taken)
    os.close(taken.fd)
    (tmp_path / "run").rename(tmp_path / "moved")
    (tmp_path / "run").mkdir(mode=0o700)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    one_line_error(res, "it is not the directory its launcher made")
    assert os.listdir(tmp_path / "run") == [] and os.listdir(tmp_path / "moved") == ["supervisor.log"]
    # the very directory it made is taken
    (tmp_path / "run").rmdir()
    (tmp_path / "moved").rename(tmp_path / "run")
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["run_id"] == "launched"


@needs_root
def test_a_fallback_runtime_directory_planted_as_a_link_is_refused_before_anything_is_made():
    """Without XDG_RUNTIME_DIR the runtime directory is <MPWATCH_TMPDIR>/mpwatch-<uid>: another
    user may make it first, as a link to a folder of theirs. Refused, and nothing made there."""
    with shared_folder() as d:
        theirs = d / "theirs"

        def plant():
            theirs.mkdir()
            theirs.chmod(0o777)
            os.symlink(theirs, d / "mpwatch-0")
        as_user(plant)
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        env["MPWATCH_TMPDIR"] = str(d)
        for args in (["ls"], ["--headless", "-n", "1", REPORTER, "3"]):
            res = subprocess.run([*MPWATCH, *map(str, args)], capture_output=True, text=True, env=env, cwd=d,
                                 timeout=60)
            one_line_error(res, "is not a private directory of this user")
        assert os.listdir(theirs) == [] and not (d / "mpwatch-runs").exists()


@needs_root
def test_another_users_runs_are_skipped_with_a_note(tmp_path):
    """As uid 65534, in a folder that holds root's 0700 run: ls --all, prune and summary skip it
    with a note (issue 19), never a traceback."""
    with shared_folder(0o755) as d:
        res = mpwatch("--headless", "-n", "1", REPORTER, "3", cwd=d)
        assert res.returncode == 0, res.stderr
        (root_run,) = (d / "mpwatch-runs").iterdir()
        home = d / "home"
        home.mkdir()
        env = nobody_env(home)
        ls = as_nobody("ls", "--all", cwd=d, env=env)
        assert ls.returncode == 0 and ls.stdout.startswith("no runs"), ls
        assert "mpwatch: note: skipped 1 folder(s) this user may not read" in ls.stderr and root_run.name in ls.stderr
        # (the folder named: ./mpwatch-runs itself is refused, being root's: test_hostile_runs_folder)
        prune = as_nobody("prune", "--keep", "0", "--dry-run", "mpwatch-runs", cwd=d, env=env)
        assert prune.returncode == 0 and "would remove 0 run(s)" in prune.stdout, prune
        assert "skipped 1 folder(s)" in prune.stderr
        summary = as_nobody("summary", "20300101-000000-other", cwd=d, env=env)
        one_line_error(summary, "1 folder(s) there this user may not read")
        mine = as_nobody("summary", root_run.name, cwd=d, env=env)
        one_line_error(mine, "is not readable by this user")
        for r in (ls, prune, summary, mine):
            no_traceback(r)


def test_an_unusable_run_dir_parent_is_one_line(tmp_path):
    """--run-dir under a folder this user cannot enter (here: a file in the way)."""
    (tmp_path / "file").write_text("")
    res = mpwatch("--headless", "-n", "1", "--run-dir", tmp_path / "file" / "run", REPORTER, cwd=tmp_path)
    one_line_error(res, "cannot create run directory")


@needs_root
def test_run_dir_under_a_folder_one_cannot_enter_is_one_line_as_another_user():
    with shared_folder(0o755) as d:
        closed = d / "closed"
        closed.mkdir(mode=0o700)
        home = d / "home"
        home.mkdir()
        res = as_nobody("--headless", "-n", "1", "--run-dir", closed / "run", REPORTER, "3", cwd=home,
                        env=nobody_env(home))
        one_line_error(res, "cannot create run directory")
        no_traceback(res)


def test_the_run_id_says_when_and_what(tmp_path):
    res = mpwatch("--headless", "-n", "1", REPORTER, "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (d,) = (tmp_path / "mpwatch-runs").iterdir()
    assert RUN_ID.match(d.name) and time.strftime("%Y%m%d") in d.name


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
