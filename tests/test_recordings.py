"""Recorded data that cannot drift: the statuses the readers' tests are fed (tests/data/statuses,
made by `python -m tests.record`) and the run directories stored for the post-mortem and replay
tests fit contract.status's schema, each recording still meets the named conditions of its
scenario, and a status the supervisor sends now has the shape (keys and kinds of values,
recursively) of the recorded one: drift fails with the command that re-records."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpwatch.contract import status
from mpwatch.contract.actions import ACTIONS
from mpwatch.rundir.postmortem import Summary
from tests import record, record_nodes
from tests.helpers import ROOT
from tests.schema import drift, fields, problems, shape

NAMES = sorted(p.stem for p in record.DATA.glob("*.json"))
SCENARIOS = record.scenarios(record.unused_pid())
STORED_RUNS = sorted(p.parent for p in (ROOT / "tests").glob("*/data/*/final.json"))


def load(name: str) -> dict:
    return json.loads((record.DATA / f"{name}.json").read_text())


def again(name: str) -> str:
    return (f"re-record it: PYTHONPATH=$PWD .venv/bin/python -m tests.record {name}, then review the snapshots "
            "that change (.venv/bin/python -m pytest tests/tui tests/remote tests/replay --snapshot-update)")


def test_every_scenario_is_recorded():
    assert set(NAMES) == {*SCENARIOS, "nodes"}


@pytest.mark.parametrize("name", NAMES)
def test_a_recording_fits_the_schema(name):
    rec = load(name)
    found = problems(rec["status"], status.Status)
    for i, st in enumerate(rec.get("node_statuses", [])):
        found += problems(st, status.Status, f"node_statuses[{i}]")
    if "lost" in rec:
        found += problems(rec["lost"]["status"], status.Status, "lost.status")
    if "final" in rec:
        found += problems(rec["final"], status.Status, "final")
    assert found == [], again(name)


@pytest.mark.parametrize("run_dir", STORED_RUNS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_a_stored_run_directorys_final_json_fits_the_schema(run_dir: Path):
    assert problems(json.loads((run_dir / "final.json").read_text()), status.Status, "final.json") == []


@pytest.mark.parametrize("name", NAMES)
def test_a_recording_meets_its_scenarios_conditions(name):
    rec = load(name)
    if name == "nodes":
        expect = record_nodes.EXPECT
        lost = [n for n in rec["lost"]["status"]["nodes"] if not n["reachable"]]
        assert [n["node"] for n in lost] == [1] and lost[0]["error"], again(name)
        unmet = [what for what, check in expect.items() if not check(rec["status"])]
    else:
        expect = SCENARIOS[name].expect
        assert rec["conditions"] == list(expect), "the scenario's conditions changed since: " + again(name)
        unmet = SCENARIOS[name].unmet(rec["status"])  # every rank listed, then each condition
    assert unmet == [], again(name)


def test_each_actions_list_is_a_key_the_schema_declares():
    """The lists a status carries for the actions are written by their row's key (contract.control's
    ControlView.into): the schema declares each, in every status for an `always` one (the
    checkpoints), once one was asked for the others; `mpwatch summary --json` (rundir.postmortem)
    has each in every summary."""
    keys, summary = fields(status.Status), fields(Summary)
    for a in ACTIONS.values():
        assert a.key in keys and keys[a.key][1] == a.always, a.name
        assert a.key in summary and summary[a.key][1], a.name


def test_the_checker_finds_what_does_not_fit():
    """Not vacuous: a key missing, one too many, a wrong type, an unknown state and alert kind."""
    st = load("gpu2")["status"]
    del st["workers"][0]["global_rank"]
    st["workers"][1]["bogus"] = 1
    st["run"]["pid"] = "4242"
    st["workers"][1]["state"] = "sleepy"
    st["gpus"][0]["alerts"][0]["kind"] = "cosmic_ray"
    assert [p.split(":")[0] for p in problems(st, status.Status)] == [
        "status.run.pid", "status.workers[0].global_rank", "status.workers[1].state", "status.workers[1].bogus",
        "status.gpus[0].alerts[0].kind"]
    before = shape(load("gpu2")["status"])
    assert drift(shape(st), before) and not drift(before, before)


def _events_shape(events: list[dict]) -> dict[str, set[str]]:
    return shape(events, "events")


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", ["gpu2", "states", "mig"])
def test_a_fresh_status_has_the_shape_of_the_recorded_one(name, tmp_path):
    """The scenario recorded again, now, from the real supervisor: its status and its events
    have every key of the stored recording and no other (each alert and event kind apart)."""
    fresh = record.record(SCENARIOS[name], tmp_path)
    stored = load(name)
    found = drift(shape(fresh["status"], "status"), shape(stored["status"], "status"))
    # events: the keys of each kind both runs had (which kinds happen is the run's own business)
    now, then = _events_shape(fresh["events"]), _events_shape(stored["events"])
    kinds = {p.split("]")[0] for p in now} & {p.split("]")[0] for p in then}
    found += drift({p: k for p, k in now.items() if p.split("]")[0] in kinds},
                   {p: k for p, k in then.items() if p.split("]")[0] in kinds})
    assert not found, f"tests/data/statuses/{name}.json has drifted from what the supervisor sends:\n" + \
        "\n".join(found) + "\n" + again(name)
