"""The statuses recorded from real runs (tests/data/statuses, made by `python -m tests.record`),
and a source that answers like a Client from one of them: the data source of the formatting
and snapshot tests. It never stands in for the supervisor in behaviour tests (those run one)."""
from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

from mpwatch.sources.local import ClientError, EventsReply
from mpwatch.contract.status import GpuTimelineReply, Status
from tests.record import DATA


@cache
def _load(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())


def recording(name: str) -> dict[str, Any]:
    """The whole recording (status, events, lines, history, logs, dumps, timeline), a copy."""
    return copy.deepcopy(_load(name))


def status(name: str) -> Status:
    return recording(name)["status"]


class RecordedSource:
    """Answers status/events/history/logs/gpu_timeline from a recording; refuses every action."""

    def __init__(self, name: str):
        self.data = recording(name)

    def status(self, tail: int | None = None) -> Status:
        return copy.deepcopy(self.data["status"])

    def events(self, since: int = 0) -> EventsReply:
        return {"events": [], "seq": self.data["status"]["events_seq"]}

    def history(self, rank: int) -> list[tuple[float, float]]:
        return [(s, v) for s, v in self.data["history"].get(str(rank), [])]

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list[str]:
        return self.data["logs"].get(str(rank), {}).get(stream, [])[-lines:]

    def gpu_timeline(self, window: float) -> GpuTimelineReply:
        timeline = self.data.get("timeline")
        if not timeline:
            raise ClientError("this recording has no GPU timeline")
        return copy.deepcopy(timeline[str(int(window))])

    def act(self, cmd: str, target: int | str) -> str:
        raise ClientError("a recorded run: nothing to act on")

    def resize(self, n: int) -> str:
        raise ClientError("a recorded run: nothing to resize")

    def stop(self) -> str:
        raise ClientError("a recorded run: nothing to stop")

    def another(self) -> RecordedSource:
        return self

    def ended(self, stop: object = None) -> tuple[Status | None, dict[str, Any] | None]:
        return self.status(), None  # the recorded status is the run's last

    def materialise(self, run_dir: Path) -> None:
        """Write the recording's stack dumps where the status points, under run_dir (the
        detail view reads a dump from the run directory)."""
        root = self.data["status"]["run"]["dir"]
        for path, text in self.data["dumps"].items():
            rel = Path(path).relative_to(root)
            (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / rel).write_text(text)
