"""The replay of a run from its directory: live or finished, at any moment of it.

- sources.replay.files: events.jsonl and gpu.jsonl indexed for the cursor (mapped, parsed where read)
- sources.replay.fold: the notable events folded into each rank's state up to a moment
- sources.replay.rebuild: a status.Status of that moment; sources.replay.cursor: the moments and the jumps
- sources.replay.logs: a rank's log as it stood then; sources.replay.source: ReplaySource, the TUI's Source
A core package: no textual, no supervisor; `mpwatch show` and `attach` on an ended run
hand a ReplaySource to the TUI (tui.replay_app).
"""
from __future__ import annotations

from mpwatch.sources.replay.source import ReplaySource

__all__ = ["ReplaySource"]
