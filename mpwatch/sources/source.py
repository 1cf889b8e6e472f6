"""What the TUI reads a run from: a live run's control socket (mpwatch.sources.local.Client) or
anything that answers the same requests (a recorded run in the tests, the synthetic run of
the benchmarks). The screens know only this Protocol. Called from worker threads only."""
from __future__ import annotations

from typing import Protocol

from mpwatch.contract.status import GpuTimelineReply, Status
from mpwatch.sources.local import EventsReply


class Source(Protocol):
    def status(self, tail: int | None = None) -> Status: ...

    def events(self, since: int = 0) -> EventsReply: ...

    def history(self, rank: int) -> list[tuple[float, float]]: ...

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list[str]: ...

    def gpu_timeline(self, window: float) -> GpuTimelineReply: ...

    def act(self, cmd: str, target: int | str) -> str: ...

    def resize(self, n: int) -> str: ...

    def stop(self) -> str: ...
