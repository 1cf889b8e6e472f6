"""A bounded memo of drawn cells, for the worker table (tui.widgets.worker_table). Runs on
the Textual thread.

Cells are keyed by their values. Some repeat on every redraw (a state, a pid, a blank);
others (a step, a loss, a heartbeat) are new in nearly every snapshot and never asked for
again. Two generations keep the first and drop the second: a new key goes into the young
generation; when that is full it becomes the old one and the former old one is dropped;
a key found in the old generation moves back to the young. So at most 2 x `size` entries
are held, and what no longer repeats is gone within two turns. (A single dict cleared when
full held 8192 entries, ~750 bytes each: it took the TUI's memory up by ~6 MiB over its
first minutes under a busy run, and kept it there.)
"""
from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class CellCache(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size  # entries a generation
        self.young: dict[K, V] = {}
        self.old: dict[K, V] = {}
        self.turns = 0  # how often the young generation became the old (tests, bench)

    def get(self, key: K) -> V | None:
        """The value, from either generation; a caller on a hot path looks in `young` itself
        first (one dict lookup, as a plain dict costs) and calls this only when it is not there."""
        value = self.young.get(key)
        if value is None:
            value = self.old.pop(key, None)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        if len(self.young) >= self.size:
            self.old, self.young = self.young, {}
            self.turns += 1
        self.young[key] = value

    def __len__(self) -> int:
        return len(self.young) + len(self.old)
