"""Issue 39, item 6: a `profile_requested` event listing 60,000 ranks made `summary` take 40 s
(`rank in list` for each rank), and each rank's answer sorted the answers again: quadratic.
Now the fold of a run's control events and the profile's words are linear in the ranks named:
a copy of a real run with such a request and 60,000 answers (4 MB of events) is summarised
and replayed well inside the readers' answer limit (a quadratic reading takes hours)."""
from __future__ import annotations

import json

import pytest

from tests.faults.hostile import no_traceback
from tests.faults.test_hostile_files import replay, run_quick

pytestmark = pytest.mark.timeout(300)
RANKS = 60_000


def test_a_profile_asked_of_60000_ranks_is_read_in_linear_time(crashed, tmp_path):
    d = crashed.copy(tmp_path)
    started = json.loads((d / "run.json").read_text())["started"]
    asked = {"ts": started + 1, "event": "profile_requested", "rank": None, "id": 7, "by": "ctl x@y",
             "step": 3, "steps": 2, "ranks": list(range(RANKS))}
    with open(d / "events.jsonl", "a") as f:
        f.write(json.dumps(asked) + "\n")
        for r in range(RANKS):
            answer = {"ts": started + 2, "event": "profile_started", "rank": r, "id": 7, "step": 3}
            f.write(json.dumps(answer) + "\n")
    res = run_quick("summary", d)
    assert res.returncode == 0, res.stderr[-2000:]
    no_traceback(res)
    assert f"profile #7 of ranks 0-{RANKS - 1}, steps 4-5, asked by ctl x@y: running on ranks 0-{RANKS - 1}" \
        in res.stdout, res.stdout[-2000:]
    s = json.loads(run_quick("summary", d, "--json").stdout)
    (p,) = s["profiles"]
    assert len(p["ranks"]) == len(p["answers"]) == RANKS and p["answers"][-1]["rank"] == RANKS - 1
    assert len(p["waiting"]) == RANKS and p["missed"] == []  # (a profile waits for its outcome)
    replay(d)  # `show`'s reading of the same, at its first and last moment
