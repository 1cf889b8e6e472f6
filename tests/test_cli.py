"""Issue 2: the command line — bad input, ls, RUN resolution, imports kept light."""
import json
import os
import subprocess
import sys
from multiprocessing.connection import AuthenticationError, Client

import pytest

from tests.helpers import FIXTURES, mpwatch, wait_for


def one_line_error(res, needle):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpwatch: error: "), res.stderr
    assert "Traceback" not in res.stderr
    assert needle in lines[0], lines[0]


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


def test_unreadable_script(tmp_path):
    if os.getuid() == 0:
        pytest.skip("root reads every file; the unreadable case needs another user (tests/faults covers it)")
    script = tmp_path / "secret.py"
    script.write_text("print(1)")
    script.chmod(0)
    one_line_error(mpwatch("--headless", script), "not readable")


def test_help_and_supervisor_import_neither_torch_nor_textual():
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "mpwatch", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "usage: mpwatch" in res.stdout
    imported = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if "|" in line}
    assert "torch" not in imported and "textual" not in imported
    assert "json" in imported  # the check itself sees imports
    code = ("import sys, mpwatch.cli, mpwatch.supervisor.core, mpwatch.client, mpwatch.worker;"
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
    one_line_error(mpwatch("ctl", "--run", run_id, "status"), "no such run")


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
