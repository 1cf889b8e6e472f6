"""The statuses recorded from real runs (tests/data/statuses, made by `python -m tests.record`),
and a source that answers like a Client from one of them: the data source of the formatting
and snapshot tests. It never stands in for the supervisor in behaviour tests (those run one)."""
from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

from mpwatch.contract import GpuTimelineReply, Status
from mpwatch.sources.local import ClientError, EventsReply
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
    """Answers status/events/history/logs/gpu_timeline from a recording; refuses every action.

    events: hand out the recorded events (else none: the screens as a TUI attached at that
    moment draws them). lost: the nodes recording's merged status once node 1 stopped
    answering. ends_after: that many statuses, then the run is gone (`ended`: the recorded
    status is its last, and it finished with exit code 1)."""

    def __init__(self, name: str, *, events: bool = False, lost: bool = False, ends_after: int | None = None):
        self.data = recording(name)
        self.recorded = self.data["lost"]["status"] if lost else self.data["status"]
        self.give_events = events
        self.ends_after = ends_after
        self.asked = 0

    def status(self, tail: int | None = None) -> Status:
        self.asked += 1
        if self.ends_after is not None and self.asked > self.ends_after:
            raise ClientError("lost the connection to the run (it may have finished)")
        return copy.deepcopy(self.recorded)

    def events(self, since: int = 0) -> EventsReply:
        seq = self.recorded["events_seq"]
        if not self.give_events:
            return {"events": [], "seq": seq}
        return {"events": [e for e in copy.deepcopy(self.data["events"]) if e.get("seq", 0) > since], "seq": seq}

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
        """The recorded run's final.json when it has one (it was stopped), else its status."""
        final = self.data.get("final", self.recorded)
        info = {"finished": True, "exit_code": final["run"]["exit_code"]} if self.ends_after is not None else None
        return copy.deepcopy(final), info

    def materialise(self, run_dir: Path) -> None:
        """Write the recording's stack dumps where the status points, under run_dir (the
        detail view reads a dump from the run directory)."""
        root = Path(self.data["status"]["run"]["dir"])
        for path, text in self.data["dumps"].items():
            if not Path(path).is_relative_to(root):  # another node's (a merged view): not here
                continue
            rel = Path(path).relative_to(root)
            (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / rel).write_text(text)
