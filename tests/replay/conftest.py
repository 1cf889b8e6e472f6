"""Runs for the replay's tests: the post-mortem's recordings of real runs (tests/recorded_runs.py:
a crash with restarts, a hang with its culprit, a scripted-NVML OOM, a SIGKILLed supervisor),
recorded once per session with the supervisor under test, and one more of a worker whose
child reports; the stored recordings of tests/replay/data and tests/cli/data for the
snapshots, which need the same files every time."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from mpwatch.contract import Event
from mpwatch.sources.replay import ReplaySource
from tests.recorded_runs import Recorded

HERE = Path(__file__).resolve().parent
STORED_HANG = HERE / "data" / "hang"
STORED_FAILED = HERE / "data" / "failed"  # rank 1 raised ValueError, rank 0 exited 0
STORED_OOM = HERE.parent / "cli" / "data" / "oom-gpu"


@pytest.fixture(scope="session")
def children(record) -> Recorded:
    """Rank 0 and 1 each start a child that reports a loss of 100 + step, theirs falls from 1."""
    return record("children", HERE / "fixtures" / "child_reports.py", n=2, until=lambda run: run.wait_exit(120))


def seek(src: ReplaySource, pred, what: str) -> int:
    """Move the cursor to the first event matching pred; its position."""
    for i, e in enumerate(src.events_list):
        if pred(e):
            assert src.move("seq", i + 1) or src.where()[0] == i
            return i
    raise AssertionError(f"no event {what} in {[e['event'] for e in src.events_list]}")


def rebuilt_end(src: ReplaySource):
    """The status rebuilt from the files at the last event, never final.json."""
    src.move("seq", len(src.events_list))
    return copy.deepcopy(src.status())


def kinds(src: ReplaySource) -> list[str]:
    return [e["event"] for e in src.events_list]


__all__ = ["STORED_FAILED", "STORED_HANG", "STORED_OOM", "Event", "kinds", "rebuilt_end", "seek"]
