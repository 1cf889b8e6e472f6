"""`mpwatch ctl --host`, `ls --host` and `attach HOST:RUN` through the test's own sshd: the
same answers as on the run's machine, and every way it can fail (host unreachable, ssh
refusing the key, no mpwatch there, no such run there, another bridge protocol) in one line
with exit code 2."""
from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import FIXTURES, mpwatch, one_line_error, wait_for
from tests.remote.sshd import ADDRESSES, REMOTE_MPWATCH

pytestmark = pytest.mark.timeout(180)
WORKER = FIXTURES / "tui_worker.py"
A, B = ADDRESSES


@pytest.fixture
def node_a(headless, sshd):
    run = headless(WORKER, n=2, env=sshd.node_env(A), opts=["--grace", "1"])
    wait_for(lambda: all(w["step"] is not None for w in run.status()["workers"]), 60, what="ranks reporting")
    return run


def host(sshd, *args, identity=None, remote=REMOTE_MPWATCH):
    extra = ["--remote-mpwatch", remote] if remote else []
    return mpwatch(*args[:1], *extra, *args[1:], env=sshd.env(identity))


def test_ctl_and_ls_over_ssh_answer_as_they_do_on_the_machine(node_a, sshd):
    run_id = node_a.status()["run"]["id"]
    res = host(sshd, "ctl", "--host", A, "--run", run_id, "status", "--json")
    assert res.returncode == 0, res.stderr
    remote, local = json.loads(res.stdout), node_a.status()
    assert remote["run"]["id"] == local["run"]["id"] and remote["run"]["pid"] == local["run"]["pid"]
    assert [w["pid"] for w in remote["workers"]] == [w["pid"] for w in local["workers"]]
    assert set(remote) == set(local)
    text = host(sshd, "ctl", "--host", A, "status")  # the newest run there, as a local ctl would pick
    assert text.returncode == 0 and f"run {run_id} (running)" in text.stdout
    res = host(sshd, "ctl", "--host", A, "pause", "1")
    assert res.returncode == 0 and res.stdout.startswith("paused rank 1")
    node_a.wait_event("paused", lambda r: r["rank"] == 1)
    logs = host(sshd, "ctl", "--host", A, "logs", "1", "--stderr", "--lines", "3")
    assert logs.returncode == 0 and logs.stdout == "tui worker rank 1 stderr hello\n"
    ls = host(sshd, "ls", "--host", A, "--json")
    assert ls.returncode == 0 and [e["run_id"] for e in json.loads(ls.stdout)] == [run_id]
    assert host(sshd, "ls", "--host", B).stdout == f"no live runs on {B}\n"  # the other "machine"
    res = host(sshd, "ctl", "--host", A, "stop")
    assert res.returncode == 0 and node_a.wait_exit(60) == 1


def test_every_failure_is_one_line_and_exit_2(node_a, sshd):
    run_id = node_a.status()["run"]["id"]
    one_line_error(host(sshd, "ctl", "--host", B, "--run", run_id, "status"), f"{B}: no such run: {run_id}")
    one_line_error(host(sshd, "attach", f"{B}:{run_id}"), f"{B}: no such run: {run_id}")
    one_line_error(host(sshd, "ctl", "--host", A, "status", identity=sshd.stranger_key),
                   f"ssh refused the login to {A}: root@{A}: Permission denied (publickey)")
    one_line_error(host(sshd, "ctl", "--host", A, "status", remote=None),
                   f"mpwatch not found on {A} (bash: line 1: mpwatch: command not found): give its path "
                   "there with --remote-mpwatch")
    one_line_error(host(sshd, "ls", "--host", A, remote="/nowhere/mpwatch"), f"mpwatch not found on {A}")
    one_line_error(host(sshd, "ls", "--host", A, "--all"), "--all reads run folders on this machine")
    one_line_error(mpwatch("ctl", "--remote-mpwatch", "x", "status"), "--remote-mpwatch goes with --host")
    one_line_error(host(sshd, "ctl", "--host", A, "logs", "0", "--follow"), "--follow reads the run directory")
    sshd.stop()
    one_line_error(host(sshd, "ctl", "--host", A, "status"), f"cannot reach {A}: ssh: connect to host {A} port "
                   f"{sshd.port}: Connection refused")
    one_line_error(host(sshd, "attach", f"{A}:{run_id}"), f"cannot reach {A}")
    assert node_a.proc.poll() is None


def test_shell_noise_before_the_bridge_is_skipped(node_a, sshd):
    noisy = f"sh -c 'echo Welcome to the cluster; echo; exec {sys.executable} -m mpwatch \"$@\"' mpwatch"
    res = host(sshd, "ctl", "--host", A, "status", "--json", remote=noisy)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["run"]["id"] == node_a.status()["run"]["id"]


def test_a_remote_speaking_another_protocol_version_is_refused(sshd, tmp_path):
    fake = tmp_path / "future_mpwatch.py"
    fake.write_text("import json, sys\nsys.stdin.readline()\n"
                    "print(json.dumps({'t': 'hello', 'proto': 'mpwatch-bridge', 'v': 7, 'mpwatch': '9.0'}))\n")
    res = host(sshd, "ctl", "--host", A, "status", remote=f"{sys.executable} {fake}")
    one_line_error(res, f"{A}: the remote mpwatch (9.0) speaks bridge protocol 7, this one")
