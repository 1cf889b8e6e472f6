"""Recorded data that cannot drift: the statuses the readers' tests are fed (tests/data/statuses,
made by `python -m tests.record`) and the run directories stored for the post-mortem and replay
tests fit contract.status's schema, each recording still meets the named conditions of its
scenario, and a status the supervisor sends now has the shape (keys and kinds of values,
recursively) of the recorded one: drift fails with the command that re-records."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpwatch.contract import ACTIONS, status
from mpwatch.rundir.postmortem import Summary
from tests import record, record_nodes
from tests.helpers import ROOT
from tests.schema import drift, event_drift, fields, problems, recording_drift, shape

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
    """The lists a status carries for the actions are written by their row's key (contract.live's
    LiveView.into): the schema declares each, in every status for an `always` one (the
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
    # a value one run had not made yet (null) hides its keys from the comparison, not a key beside it
    paced, unpaced = load("gpu2")["status"], load("gpu2")["status"]
    for w in unpaced["workers"]:
        w["pace"] = None
    assert not drift(shape(paced), shape(unpaced)) and not drift(shape(unpaced), shape(paced))
    unpaced["workers"][0]["bogus"] = 1
    assert [p.split(":")[0] for p in drift(shape(unpaced), shape(paced))] == ["+ workers[].bogus"]


def _fresh(name: str, tmp_path: Path) -> dict:
    if name == "nodes":
        return record_nodes.record_nodes(tmp_path)
    return record.record(SCENARIOS[name], tmp_path)


# The slowdown scenario's fresh recording is made by the run of its behaviour and screen test
# (tests/supervisor/test_slowdown_run.py): one run of two minutes, not two.
CHECKED_ELSEWHERE = {"slowdown": "tests/supervisor/test_slowdown_run.py::test_a_dataset_3x_slower_on_every_rank_is_named_as_data_on_screen_as_recorded"}


def assert_no_drift(name: str, fresh: dict) -> None:
    found = recording_drift(fresh, load(name))
    assert not found, f"tests/data/statuses/{name}.json has drifted from what the supervisor sends:\n" + \
        "\n".join(found) + "\n" + again(name)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", [n for n in NAMES if n not in CHECKED_ELSEWHERE])
def test_a_fresh_status_has_the_shape_of_the_recorded_one(name, tmp_path):
    """Every scenario recorded again, now, from the real supervisor: each status it holds and its
    events have every key of the stored recording and no other (each alert and event kind apart)."""
    assert_no_drift(name, _fresh(name, tmp_path))


def test_every_scenario_is_in_the_drift_check():
    """Here, or in the test its fresh recording is made by (which calls assert_no_drift)."""
    for name, where in CHECKED_ELSEWHERE.items():
        path, test = where.split("::")
        text = (ROOT / path).read_text()
        assert f"def {test}(" in text and f'assert_no_drift("{name}"' in text, where


@pytest.mark.parametrize("name", NAMES)
def test_a_recording_is_as_the_recorder_wrote_it(name):
    """Recordings are written by the recorder alone: its digest of the rest of the file still holds
    (a value or a condition changed by hand does not)."""
    rec = load(name)
    assert rec.get("digest") == record.digest(rec), f"tests/data/statuses/{name}.json was edited by hand: " + again(name)


def test_a_hand_edit_is_caught():
    rec = load("states")
    assert record.digest(rec) == rec["digest"]
    rec["conditions"].append("a condition added by hand")
    assert record.digest(rec) != rec["digest"]
    rec = load("states")
    rec["status"]["workers"][0]["step"] += 1
    assert record.digest(rec) != rec["digest"]


def test_the_events_drift_on_keys_every_event_of_a_kind_carries():
    """Not vacuous, and not a race of the run: a key every `stalled` event carries, gone, is drift;
    an alert's `update`, which only a finding that learnt more while recorded carries, is not."""
    events = load("nodes")["events"]
    assert event_drift(events, events) == []
    alerts = [i for i, e in enumerate(events) if e["event"] == "gpu_alert"]
    assert alerts, "the nodes recording has GPU alerts"
    some_update = [dict(e, update=True) if i == alerts[0] else e for i, e in enumerate(events)]
    assert event_drift(events, some_update) == [] and event_drift(some_update, events) == []
    no_kind = [{k: v for k, v in e.items() if not (e["event"] == "stalled" and k == "kind")} for e in events]
    assert event_drift(no_kind, events) == [
        "- events[event=stalled].kind (the recording has it, the supervisor no longer sends it)"]


def test_what_one_run_alone_saw_is_no_drift_but_a_key_lost_under_both_is():
    """An alert kind one run raised and the other not, a list one run saw empty: nothing to compare
    (a race of the run); a key gone from an alert kind both runs raised is drift."""
    one = {"alerts": [{"kind": "hang", "message": "x", "at": 1.0}], "outsiders": [{"pid": 1}]}
    other = {"alerts": [{"kind": "hang", "message": "y", "at": 2.0}, {"kind": "outside", "who": "z"}],
             "outsiders": []}
    assert drift(shape(one), shape(other)) == [] and drift(shape(other), shape(one)) == []
    lost = {"alerts": [{"kind": "hang", "message": "x"}], "outsiders": []}
    assert drift(shape(lost), shape(other)) == [
        "- alerts[kind=hang].at: ['number'] (the recording has it, the supervisor no longer sends it)"]


def test_a_pace_not_yet_compared_with_its_peers_is_no_drift():
    """Pace.relative maps phases to speeds (contract.status: {} until a rank has peers to be
    compared with): which phases it holds is the run's data, not the schema's (tests.schema's
    DATA_KEYED is read from the schema), so a fresh recording made before the comparison is no drift."""
    import copy

    stored = load("gpu2")
    fresh = copy.deepcopy(stored)
    for w in fresh["status"]["workers"]:
        assert w["pace"]["relative"], "the stored recording compares its ranks"
        w["pace"]["relative"] = {}
    assert recording_drift(fresh, stored) == []
