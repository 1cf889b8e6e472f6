"""Plan the table update from the rows shown to the rows wanted (pure).

The memray/Dolphie pattern: update only rows whose data changed, add rows for new keys,
remove rows for gone keys; when the order differs (a sort, a child row appearing in the
middle) the rows are re-ordered in place rather than rebuilt, since DataTable appends
only at the end and re-adding rows re-measures every cell. Rebuild (clear, then add)
only when the table is empty or most rows are gone: remove_row in a loop costs more.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

V = TypeVar("V")  # a row's value: anything that compares with ==


@dataclass
class Plan(Generic[V]):
    rebuild: bool = False
    remove: list[str] = field(default_factory=list)  # keys
    update: list[tuple[str, V]] = field(default_factory=list)  # (key, new value) for rows that changed
    add: list[tuple[str, V]] = field(default_factory=list)  # (key, value), appended at the end
    reorder: list[str] | None = None  # the final key order, when appending does not give it

    @property
    def empty(self) -> bool:
        return not (self.rebuild or self.remove or self.update or self.add or self.reorder)


def plan(shown: dict[str, V], order: list[str], wanted: list[tuple[str, V]]) -> Plan[V]:
    """shown: key -> value now on screen; order: their keys top to bottom;
    wanted: [(key, value)] in the order they should appear. Values are anything that
    compares with == (the rows' source data)."""
    wanted_keys = [k for k, _ in wanted]
    wanted_set = set(wanted_keys)
    kept = [k for k in order if k in wanted_set]
    gone = len(order) - len(kept)
    if not order or (gone > 8 and gone * 2 > len(order)):
        if not order and not wanted:
            return Plan[V]()
        return Plan[V](rebuild=True, add=list(wanted))
    p = Plan[V](remove=[k for k in order if k not in wanted_set])
    for key, cells in wanted:
        old = shown.get(key)
        if old is None:
            p.add.append((key, cells))
        elif old != cells:
            p.update.append((key, cells))
    if kept + [k for k, _ in p.add] != wanted_keys:
        p.reorder = wanted_keys
    return p
