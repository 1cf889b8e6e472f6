"""A tunable refused where it was declared (issue 30, item 3: a float default that is not
finite) is seen after the fact as it was live: the supervisor writes a tunable_refused event
for each refusal it keeps in the rank's status, and the replay (`mpwatch show`) folds them into
each rank's refused_tunables. On a real run of two ranks each declaring x = inf, y = nan and
z = -inf beside lr, stopped with ctl."""
from __future__ import annotations

import json

import pytest

from mpwatch.rundir import reader
from mpwatch.sources.replay import ReplaySource
from mpwatch.text import eventtext
from tests.faults.test_hostile_tunables import NON_FINITE
from tests.helpers import wait_for
from tests.replay.conftest import rebuilt_end, seek

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def refused(record, tmp_path_factory):
    script = tmp_path_factory.mktemp("odd") / "odd.py"
    script.write_text(NON_FINITE)

    def until(run):
        wait_for(lambda: all(len(w.get("refused_tunables", [])) == 3 for w in run.status()["workers"]), 60,
                 what="three refusals on each rank in the status")
        run.ctl("stop")
        run.wait_exit(60)
    return record("refused", script, n=2, until=until)


def test_each_refusal_is_an_event_and_the_replay_shows_them(refused):
    events = [e for e in reader.read_events(refused.dir) if e["event"] == "tunable_refused"]
    assert sorted((e["rank"], e["tunable"]) for e in events) == [(r, t) for r in (0, 1) for t in "xyz"], \
        events
    x = next(e for e in events if e["rank"] == 0 and e["tunable"] == "x")
    assert eventtext.line(x) == f"rank 0: tunable x refused: {x['why']}" and "finite" in x["why"]
    final = json.loads((refused.dir / "final.json").read_text())  # the live status at the end
    live = {w["rank"]: w["refused_tunables"] for w in final["workers"]}
    assert all(len(v) == 3 for v in live.values()), live

    src = ReplaySource(refused.dir)
    first = seek(src, lambda e: e["event"] == "tunable_refused", "the first refusal")
    rank = src.events_list[first]["rank"]
    before = {w["rank"]: w.get("refused_tunables") for w in src.status()["workers"]}
    assert before[rank] and len(before[rank]) == 1 and before[rank][0] in live[rank], before
    st = rebuilt_end(src)
    assert {w["rank"]: w.get("refused_tunables") for w in st["workers"]} == live
    assert [t["name"] for t in st["tunables"]] == ["lr"]
