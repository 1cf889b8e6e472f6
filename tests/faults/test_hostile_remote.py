"""A hostile or damaged other end of `ctl --host` / `ls --host` (issue 22, items 5 and 7),
through the test's own sshd: a remote "mpwatch" that speaks the bridge protocol and answers
with a recorded status (tests/data/statuses) crafted with escape sequences or missing a key.
Nothing a terminal would obey is printed, a status this mpwatch cannot read is one line and
exit code 2, and so is a --remote-mpwatch that is no command line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, mpwatch, one_line_error
from tests.remote.sshd import ADDRESSES

pytestmark = pytest.mark.timeout(180)
A = ADDRESSES[0]
ESC = "\x1b]0;pwned\x07\x1b[2J"
RECORDED = ROOT / "tests" / "data" / "statuses" / "gpu2.json"

# A remote "mpwatch bridge" that answers every request with the status in argv[1], and its
# `--ls` hello with the entries in argv[2].
FAKE_BRIDGE = """
import json, sys
status, runs = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.stdin.readline()
hello = {"t": "hello", "proto": "mpwatch-bridge", "v": 1, "mpwatch": "0.1.0", "host": "h", "user": "u"}
if "--ls" in sys.argv:
    print(json.dumps({**hello, "runs": runs}), flush=True)
    sys.exit(0)
print(json.dumps({**hello, "run": {"run_id": "r", "run_dir": "/x", "pid": 1}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    reply = {"ok": True, "status": status} if req["cmd"] == "status" else {"ok": True, "message": status["run"]["id"]}
    print(json.dumps({"id": req["id"], "reply": reply}), flush=True)
"""


def fake_remote(tmp_path: Path, status: dict, runs: list) -> str:
    (tmp_path / "bridge.py").write_text(FAKE_BRIDGE)
    (tmp_path / "status.json").write_text(json.dumps(status))
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    return f"{sys.executable} {tmp_path / 'bridge.py'} {tmp_path / 'status.json'} {tmp_path / 'runs.json'}"


def recorded_status() -> dict:
    return json.loads(RECORDED.read_text())["status"]


def hostile_status() -> dict:
    st = recorded_status()
    st["run"]["id"] = f"run{ESC}"
    st["run"]["script"] = f"train{ESC}.py"
    st["workers"][0]["cause"] = f"died{ESC}"
    for w in st["workers"]:
        for c in w["children"]:
            c["cmd"] = f"{ESC}sleep"
    st["alerts"].append({"ts": 1.0, "kind": "disk", "message": f"alert{ESC}", "rank": None})
    return st


def test_a_remote_status_with_escapes_is_printed_harmless(sshd, tmp_path):
    entry = {"run_id": f"r{ESC}", "run_dir": f"/d{ESC}", "pid": 1, "script": "x", "started": 1.0, "nprocs": 2}
    remote = fake_remote(tmp_path, hostile_status(), [entry])
    for args in (["ctl", "--host", A, "--remote-mpwatch", remote, "status"],
                 ["ctl", "--host", A, "--remote-mpwatch", remote, "stop"],
                 ["ls", "--host", A, "--remote-mpwatch", remote]):
        res = mpwatch(*args, env=sshd.env())
        assert res.returncode == 0, res.stderr
        assert "pwned" in res.stdout and "\x1b" not in res.stdout and "\x07" not in res.stdout, (args, res.stdout)


def test_a_remote_status_without_a_key_is_one_line(sshd, tmp_path):
    st = recorded_status()
    del st["run"]["counts"]
    remote = fake_remote(tmp_path, st, [])
    res = mpwatch("ctl", "--host", A, "--remote-mpwatch", remote, "status", env=sshd.env())
    one_line_error(res, f"{A}: the run there sent a status this mpwatch cannot read (status.run.counts: missing)")
    st = recorded_status()
    st["workers"][1]["restarts"] = "z"
    remote = fake_remote(tmp_path, st, [{"run_id": 3}])
    res = mpwatch("ctl", "--host", A, "--remote-mpwatch", remote, "status", env=sshd.env())
    one_line_error(res, "status.workers[1].restarts: str 'z' where int belongs")
    ls = mpwatch("ls", "--host", A, "--remote-mpwatch", remote, env=sshd.env())
    assert ls.returncode == 0 and ls.stdout == f"no live runs on {A}\n", ls  # an entry that is none is left out


def test_a_remote_mpwatch_that_is_no_command_line_is_one_line(tmp_path):
    for args in (["ctl", "--host", "h", "--remote-mpwatch", "a 'b", "status"],
                 ["ls", "--host", "h", "--remote-mpwatch", "a 'b"],
                 ["attach", "--remote-mpwatch", "a 'b", "h:r"]):
        one_line_error(mpwatch(*args, cwd=tmp_path), "--remote-mpwatch \"a 'b\" is no command: No closing quotation")


def test_a_run_starting_with_a_dash_reaches_the_bridge_as_a_run(sshd):
    """RUN is passed after `--`: a remote `mpwatch bridge -x` would take it for an option."""
    from mpwatch.sources.remote.client import Transport

    argv = Transport().argv("h", ["--", "--help"])
    assert argv[-1].endswith("bridge -- --help")
    res = mpwatch("ctl", "--host", A, "--remote-mpwatch", f"{sys.executable} -m mpwatch", "--run=-x", "status",
                  env=sshd.env())
    one_line_error(res, f"{A}: no such run: -x")
