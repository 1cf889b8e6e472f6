"""What the TUI reads a run from: a live run's control socket (mpwatch.sources.local.Client) or
anything that answers the same requests (a recorded run in the tests, the synthetic run of
the benchmarks). The screens know only this Protocol. Called from worker threads only."""
from __future__ import annotations

import threading
from typing import Any, Protocol

from mpwatch.contract import GpuTimelineReply, Status
from mpwatch.sources.local import ControlReply, EventsReply


class Source(Protocol):
    def status(self, tail: int | None = None) -> Status: ...

    def events(self, since: int = 0) -> EventsReply: ...

    def history(self, rank: int) -> list[tuple[float, float]]: ...

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list[str]: ...

    def gpu_timeline(self, window: float) -> GpuTimelineReply: ...

    def act(self, cmd: str, target: int | str) -> str: ...

    def resize(self, n: int) -> str: ...

    def stop(self) -> str: ...

    def ask(self, action: str, target: int | str, step: int | None = None, by: str = "?", plan: bool = False,
            **args: object) -> ControlReply:
        """An action at one step (contract.actions: "checkpoint", "profile" with its `steps`);
        `plan`: only the step it would be at."""
        ...

    def set_tunable(self, name: str, value: str, step: int | None = None, by: str = "?",
                    plan: bool = False) -> ControlReply:
        """A tunable's new value, typed as text, on every rank at one step."""
        ...

    def another(self) -> Source:
        """A connection of its own for the TUI's actions (a key never waits behind a status
        poll), or this one where requests may be in flight at once."""
        ...

    def ended(self, stop: threading.Event | None = None) -> tuple[Status | None, dict[str, Any] | None]:
        """How the run ended, once a request said it is gone: its last status (final.json)
        and its run.json, each None where not known; may wait a moment for them (until
        `stop` is set)."""
        ...
