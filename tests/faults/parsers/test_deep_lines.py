"""Issue 39, item 5: an events.jsonl line nested 100,000 deep (200 KB, under the line cap) is
one line that is no event, for `summary` and `show` alike, never a RecursionError traceback.
Each case damages a copy of a real run (tests/recorded_runs.py)."""
from __future__ import annotations

import json

import pytest

from tests.faults.hostile import no_traceback
from tests.faults.test_hostile_files import replay, run_quick

pytestmark = pytest.mark.timeout(300)
DEPTH = 100_000


def deep_line(depth: int = DEPTH) -> bytes:
    """An event whose field nests `depth` lists: 2 bytes a level."""
    head = b'{"ts": 1.0, "event": "alert", "rank": 0, "kind": "x", "message": '
    return head + b"[" * depth + b"]" * depth + b"}\n"


@pytest.mark.parametrize("where", ["middle", "first"])
def test_a_line_nested_100000_deep_is_one_bad_line(crashed, tmp_path, where):
    d = crashed.copy(tmp_path)
    events = d / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    line = deep_line()
    assert len(line) < 4 << 20  # under the line cap: it is read, not skipped unread
    at = 0 if where == "first" else len(lines) // 2
    events.write_bytes(b"".join(lines[:at] + [line] + lines[at:]))
    res = run_quick("summary", d)
    assert res.returncode == 0, res.stderr[-2000:]
    no_traceback(res)
    assert "events.jsonl: 1 unreadable line(s) skipped" in res.stdout, res.stdout
    s = json.loads(run_quick("summary", d, "--json").stdout)
    assert [r["rank"] for r in s["ranks"]] == [0, 1] and s["listing"]["first_failure"]["rank"] in (0, 1)
    got = replay(d)  # `show`'s reading, at its first and last moment
    assert got["ranks"] == [0, 1], got
