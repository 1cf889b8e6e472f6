"""HOST:RUN on the command line and the ssh command it becomes: nothing of what a user types
reaches ssh as an option or the remote shell unquoted."""
from __future__ import annotations

import shlex

from mpwatch.settings import Settings
from mpwatch.sources.remote.client import SSH_OPTIONS, Target, Transport, parse_target


def test_host_run_targets_and_local_runs(tmp_path):
    assert parse_target("gpu-3:20260101-000000-train") == Target("gpu-3", "20260101-000000-train")
    assert parse_target("ana@gpu-3:") == Target("ana@gpu-3", None)
    assert parse_target("20260101-000000-train") is None  # a run here
    odd = tmp_path / "runs:old"
    odd.mkdir()
    assert parse_target(str(odd)) is None  # a directory here, colon or not
    assert parse_target("-oProxyCommand=touch /tmp/x:run") is None  # never an ssh option
    assert parse_target(":run") is None and parse_target("a b:run") is None


def test_the_ssh_command_line():
    t = Transport(ssh=("ssh", "-F", "/cfg"), remote_mpwatch="~/venv/bin/mpwatch")
    argv = t.argv("ana@gpu-3", ["run; rm -rf ~"])
    assert argv[:3] == ["ssh", "-F", "/cfg"] and tuple(argv[3:3 + len(SSH_OPTIONS)]) == SSH_OPTIONS
    assert "BatchMode=yes" in argv and argv[-3:-1] == ["--", "ana@gpu-3"]
    assert shlex.split(argv[-1]) == ["~/venv/bin/mpwatch", "bridge", "run; rm -rf ~"]
    assert argv[-1].startswith("~/venv/bin/mpwatch bridge ")  # ~ left for the remote shell to expand
    t = Transport.from_settings(Settings(), "python3 -m mpwatch")
    assert t.argv("h", [])[-1] == "python3 -m mpwatch bridge"


def test_mpwatch_ssh_names_the_ssh_command(monkeypatch):
    monkeypatch.setenv("MPWATCH_SSH", "ssh -F '/my dir/cfg' -J bastion")
    assert Transport.from_settings(Settings.from_env()).ssh == ("ssh", "-F", "/my dir/cfg", "-J", "bastion")
    monkeypatch.setenv("MPWATCH_SSH", "")
    assert Transport.from_settings(Settings.from_env()).ssh == ("ssh",)
    assert Transport.from_settings(Settings(ssh=("ssh", "-4"))).ssh == ("ssh", "-4")  # the CLI's, as given
