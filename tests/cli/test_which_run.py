"""With two live runs and no --run (issue 20, item 5): the ctl commands that act refuse, with
exit code 2 and the list of live runs (id, script, started, directory), and act on neither;
the read-only ones take the newest and say so on stderr. Real supervisors, real workers."""
import argparse
import json

import pytest

from mpwatch.cli.args import UsageError
from mpwatch.cli.ctl_args import ctl_parser
from mpwatch.cli.which_run import READ_ONLY
from tests.helpers import FIXTURES, mpwatch, wait_for

pytestmark = pytest.mark.xdist_group("which_run")  # the two runs are started once, in one lane
WORKER = FIXTURES / "tui_worker.py"
FLOOD = FIXTURES / "forever.py"
ACTING = ("paused", "resumed", "worker_exited", "dump", "stopping", "resized", "restarted",
          "profile_requested", "memory_requested")


@pytest.fixture(scope="module")
def two_runs(headless_module):
    """An older run of tui_worker.py, then a newer one of forever.py, both live (each test
    leaves them as it found them)."""
    older = headless_module(WORKER, n=1, opts=["--grace", "1"])
    wait_for(lambda: (older.run_dir / "control.json").exists(), 60, what="the first run")
    newer = headless_module(FLOOD, n=1, opts=["--grace", "1"])
    for run in (older, newer):
        wait_for(lambda run=run: run.worker(0)["state"] == "running", 60, what="a running worker")
    return older, newer


def ids(*runs) -> list[str]:
    return [json.loads((r.run_dir / "run.json").read_text())["run_id"] for r in runs]


@pytest.mark.parametrize("action", [["pause", "0"], ["resume", "0"], ["kill", "0"], ["restart", "all"],
                                    ["dump", "0"], ["resize", "2"], ["stop"], ["profile", "0"],
                                    ["memory", "0"]])
def test_an_acting_command_without_run_refuses_among_several_live_runs(two_runs, action):
    older, newer = two_runs
    before = {run: len(run.events()) for run in two_runs}
    res = mpwatch("ctl", *action)
    assert res.returncode == 2 and res.stdout == "", (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert lines[0].startswith(f"mpwatch: error: 2 live runs: say which one to {action[0]} with --run RUN")
    assert "Traceback" not in res.stderr
    new_id, old_id = ids(newer, older)
    assert lines[1].split() == ["RUN", "SCRIPT", "STARTED", "DIRECTORY"]
    assert lines[2].split()[0] == new_id and lines[3].split()[0] == old_id  # newest first
    assert str(FLOOD) in lines[2] and str(newer.run_dir) in lines[2]
    assert str(WORKER) in lines[3] and str(older.run_dir) in lines[3]
    for run in (older, newer):  # neither was touched
        assert not [e for e in run.events()[before[run]:] if e["event"] in ACTING]
        assert run.worker(0)["state"] == "running"


def test_read_only_commands_take_the_newest_and_say_so(two_runs):
    older, newer = two_runs
    new_id, old_id = ids(newer, older)
    res = mpwatch("ctl", "status")
    assert res.returncode == 0 and f"run {new_id} " in res.stdout.splitlines()[0]
    assert res.stderr.startswith(f"mpwatch: 2 live runs; this is the newest, {new_id} ({FLOOD}, started ")
    assert f"--run picks another ({old_id})" in res.stderr
    res = mpwatch("ctl", "logs", "0")
    assert res.returncode == 0 and f"this is the newest, {new_id}" in res.stderr
    # with --run, the older one, silently
    paused = len(older.events("paused"))
    res = mpwatch("ctl", "--run", old_id, "pause", "0")
    assert res.returncode == 0 and res.stderr == "" and "paused rank 0" in res.stdout
    older.wait_event("paused", count=paused + 1)
    assert not newer.events("paused")
    older.ctl("resume", "0")  # as it was found (the runs are the module's)
    older.wait_state(0, "running")
    older.wait_event("resumed", count=paused + 1)  # written after the state turns (the next test counts)


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every action the ctl parser has, today's and any added later."""
    sub = next(a for a in ctl_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _argv(name: str, parser: argparse.ArgumentParser) -> list[str]:
    """The action with a value its parser takes for each positional argument ("0", "1" or "all")."""
    out = [name]
    for a in parser._actions:
        if a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        for candidate in ("0", "1", "all"):
            try:
                (a.type or str)(candidate)
            except (ValueError, TypeError, argparse.ArgumentTypeError, UsageError):
                continue
            out.append(candidate)
            break
        else:
            raise AssertionError(f"no sample value for ctl {name}'s {a.dest}")
    return out


def test_every_action_but_the_read_only_ones_refuses_among_several_live_runs(two_runs):
    """Issue 31, item 1: `ctl set` and `ctl checkpoint` acted on the newest of two runs; now
    every action the parser has refuses unless it is in the one read-only list (so one added
    later refuses too). Fails on the code before: set and checkpoint answered exit 0."""
    older, newer = two_runs
    actions = _subcommands()
    assert {"status", "logs", "set", "checkpoint", "pause", "stop"} <= set(actions)
    assert {"status", "logs"} == READ_ONLY
    acting = sorted(set(actions) - READ_ONLY)
    before = {run: len(run.events()) for run in two_runs}
    for name in acting:
        argv = _argv(name, actions[name])
        res = mpwatch("ctl", *argv)
        assert res.returncode == 2 and res.stdout == "", (argv, res.returncode, res.stdout, res.stderr)
        head = f"mpwatch: error: 2 live runs: say which one to {name} with --run RUN"
        assert res.stderr.startswith(head), (argv, res.stderr)
        assert len(res.stderr.splitlines()) == 4  # the line, the header, the two runs
    for run in (older, newer):  # neither was asked anything
        assert not [e for e in run.events()[before[run]:]
                    if e["event"] in ACTING or e["event"] in ("tunable_set", "checkpoint_requested")]
