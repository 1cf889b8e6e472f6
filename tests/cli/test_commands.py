"""Issue 2: the command line — bad input, ls, RUN resolution, imports kept light."""
import json
import os
import shutil
import subprocess
import sys
from multiprocessing.connection import AuthenticationError, Client

import pytest

from tests.helpers import FIXTURES, mpwatch, one_line_error, wait_for


@pytest.mark.parametrize("args, needle", [
    (["--headless", "no/such/script.py"], "script not found: no/such/script.py"),
    (["--headless", str(FIXTURES)], "is a directory"),
    (["--headless", "-n", "0", str(FIXTURES / "reporter.py")], "must be at least 1"),
    (["--headless", "-n", "two", str(FIXTURES / "reporter.py")], "expected a whole number"),
    (["--headless", "--stall-timeout", "-5", str(FIXTURES / "reporter.py")], "positive number of seconds"),
    (["--headless", "--grace", "-1", str(FIXTURES / "reporter.py")], "non-negative number of seconds"),
    (["--headless", "--max-restarts", "-1", str(FIXTURES / "reporter.py")], "must not be negative"),
    (["--headless", "--resize-mode", "sideways", str(FIXTURES / "reporter.py")], "invalid choice"),
    ([], "the following arguments are required: SCRIPT"),
    (["ctl", "--run", "no-such-run", "status"], "no such run: no-such-run"),
    (["ctl", "--run", "/", "status"], "not an mpwatch run directory"),
    (["ctl", "--run", "no-such-run", "pause", "minus"], "expected a rank number or 'all'"),
    (["ctl", "--run", "no-such-run", "resize", "0"], "must be at least 1"),
    (["attach", "no-such-run"], "no such run: no-such-run"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    one_line_error(mpwatch(*args), needle)


@pytest.mark.parametrize("args", [[], ["--headless"], ["-n", "2"]])
def test_without_a_script_only_the_script_is_said_required(args):
    res = mpwatch(*args)
    one_line_error(res, "the following arguments are required: SCRIPT")
    assert res.stderr.rstrip().endswith("required: SCRIPT") and "ARGS" not in res.stderr  # ARGS is optional


def test_help_and_supervisor_import_neither_torch_nor_textual():
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "mpwatch", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "usage: mpwatch" in res.stdout
    imported = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if "|" in line}
    assert "torch" not in imported and "textual" not in imported
    assert "json" in imported  # the check itself sees imports
    code = ("import sys, mpwatch.cli, mpwatch.supervisor.core, mpwatch.sources.local, mpwatch.worker.api;"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'textual')];"
            "print(bad)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_ls_and_ctl_by_run_id_then_finished_run_is_an_error(headless):
    run = headless(FIXTURES / "forever.py", n=1)
    run_id = json.loads((run.run_dir / "run.json").read_text())["run_id"]
    listed = json.loads(mpwatch("ls", "--json").stdout)
    assert run_id in [e["run_id"] for e in listed]
    assert run_id in mpwatch("ls").stdout
    res = mpwatch("ctl", "--run", run_id, "status")
    assert res.returncode == 0 and f"run {run_id}" in res.stdout
    wait_for(lambda: run.worker(0)["state"] == "running", what="running")
    bad_rank = mpwatch("ctl", "--run", run_id, "pause", "7")
    one_line_error(bad_rank, "no rank 7 in this run")
    run.ctl("stop")
    run.wait_exit()
    assert run_id not in [e["run_id"] for e in json.loads(mpwatch("ls", "--json").stdout)]
    one_line_error(mpwatch("ctl", "--run", run.run_dir, "status"), "has finished")
    # By id: found in ./mpwatch-runs of the working directory, where runs go by default.
    one_line_error(mpwatch("ctl", "--run", run_id, "status", cwd=run.tmp), "no such run")
    (run.tmp / "mpwatch-runs").mkdir()
    shutil.copytree(run.run_dir, run.tmp / "mpwatch-runs" / run_id)
    for args in (["ctl", "--run", run_id, "status"], ["ctl", "--run", run_id, "stop"]):  # attach replays it
        one_line_error(mpwatch(*args, cwd=run.tmp), f"run {run_id} has finished (exit code 1)")


def test_ctl_status_json_is_the_status_the_tests_read_over_the_socket(headless):
    """HeadlessRun.status() asks the socket in-process (a ctl per poll cost a thousand
    interpreters); `ctl status --json` must print that same document."""
    run = headless(FIXTURES / "forever.py", n=2)
    def both_running():
        ws = run.status()["workers"]
        return len(ws) == 2 and all(w["state"] == "running" for w in ws)
    wait_for(both_running, what="both ranks running")
    printed, read = json.loads(run.ctl("status", "--json").stdout), run.status()
    assert printed["run"]["id"] == read["run"]["id"] and set(printed) == set(read)
    assert [(w["rank"], w["pid"], w["state"]) for w in printed["workers"]] == \
        [(w["rank"], w["pid"], w["state"]) for w in read["workers"]]
    assert [set(w) for w in printed["workers"]] == [set(w) for w in read["workers"]]


def test_control_socket_refuses_a_wrong_key(headless):
    run = headless(FIXTURES / "forever.py", n=1)
    ctl = json.loads((run.run_dir / "control.json").read_text())
    assert oct((run.run_dir / "control.json").stat().st_mode & 0o777) == "0o600"
    assert oct(run.run_dir.stat().st_mode & 0o777) == "0o700"
    assert oct(os.stat(ctl["address"]).st_mode & 0o777) == "0o600"
    with pytest.raises(AuthenticationError):
        Client(ctl["address"], family="AF_UNIX", authkey=b"not the key")
    # The supervisor is unaffected and still answers the right key.
    assert run.status()["run"]["refused_connections"] >= 1
