"""The run's OOM findings, one for each OOM of a rank (supervisor.gpu.oom_story decides what it says):
raised when the rank's OomRecord comes (the channel hub's thread: the observer saw it, caught or
not), or when the rank dies of it (the main thread: its stderr's line, its record's message); the
second of the two completes the first in place, as one finding (an `update`), never a second one.

Kept by the GPU watcher (supervisor.gpu.watch), under its lock: the findings of the ranks that
hit an OOM, the last OOMS_KEPT on each GPU shown with that GPU's alerts, and the table's note of
each rank's latest (WorkerMemory). A rank's OOMs are told apart by its process (pid) and the
record's `seq`; one that comes within the cooldown of the rank's last announced one replaces it
quietly (a script that catches OOMs in a loop is one finding, not one a step).
"""
from __future__ import annotations

import getpass
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mpwatch.contract import CudaView, DevKey, GpuAlert, GpuProcess, GpuView, OomRecord, WorkerMemory, dev_key
from mpwatch.supervisor.gpu import oom_story, oom_words
from mpwatch.supervisor.gpu.alerts import AlertConfig, alert_key
from mpwatch.text.gpu_names import view_name

OOMS_KEPT = 5  # OOM findings shown per GPU
Told = Literal["new", "update", "quiet"]


@dataclass(frozen=True)
class OomPlace:
    """Where a rank's OOM happened, as the watcher knew it then."""

    key: DevKey | None  # the GPU, or MIG slice
    where: str
    view: GpuView | None
    age_s: float | None  # how old the view's process list was
    homes: Mapping[int, DevKey]  # rank -> its own GPU (or MIG slice)
    by_pid: Mapping[int, int]  # a rank's pid -> the rank (for the processes torch's message names)


@dataclass
class _Held:
    alert: GpuAlert
    pid: int | None
    seq: int | None
    record: OomRecord | None
    announced: float  # wall clock of its last event


class OomFindings:
    def __init__(self, cfg: AlertConfig, me: str | None, history: bool):
        self.cfg = cfg
        self.me = me  # this user: another user's process is another user's job
        self.history = history  # --cuda-memory-history
        self._by_rank: dict[int, _Held] = {}  # rank -> its latest OOM's finding
        self._by_gpu: dict[DevKey | None, list[GpuAlert]] = {}  # GPU or slice -> the findings shown there

    def raise_(self, rank: int, pid: int | None, record: OomRecord | None, line: str | None, died: bool,
               place: OomPlace, now: float, used_cuda: bool = True) -> tuple[GpuAlert, Told]:
        """The finding of this OOM, and how it is told: new, an update of the one of the same OOM
        already told, or quietly in place of the rank's last (see the module's doc)."""
        held = self._by_rank.get(rank)
        same = held is not None and held.pid == pid and (record is None or held.seq == record["seq"])
        if same and held is not None and held.record is not None:  # what each told of this OOM, newest first
            record = held.record if record is None else _merged(held.record, record)
        words = oom_words.read(line or (record["message"] if record is not None else None))
        facts = oom_story.OomFacts(rank, place.key, place.where, place.view, _procs(place, words),
                                   place.age_s, record, words, died, place.homes, self.me, self.history,
                                   used_cuda or (held is not None and held.record is not None))
        a = oom_story.finding(facts, self.cfg)
        if line is not None:
            a["line"] = line[:300]
        quiet = not same and not died and held is not None and held.pid == pid \
            and now - held.announced < self.cfg.cooldown_s
        a["since"] = held.alert["since"] if held is not None and (same or quiet) else now
        self._keep(rank, _Held(a, pid, record["seq"] if record is not None else None, record,
                               held.announced if quiet and held is not None else now))
        return a, "quiet" if quiet else "update" if same else "new"

    def _keep(self, rank: int, h: _Held) -> None:
        old = self._by_rank.get(rank)
        if old is not None:
            kept = self._by_gpu.get(alert_key(old.alert), [])
            kept[:] = [a for a in kept if a is not old.alert]
        self._by_rank[rank] = h
        kept = self._by_gpu.setdefault(alert_key(h.alert), [])
        kept.append(h.alert)
        del kept[:-OOMS_KEPT]

    def on_gpu(self, key: DevKey) -> list[GpuAlert]:
        return list(self._by_gpu.get(key, ()))

    def cover(self, lists: Sequence[list[GpuAlert]]) -> None:
        """The tracker's bare caught-OOM alerts (a rise of num_ooms) of ranks with a finding give
        way to it (a tick's alerts, before they are told)."""
        for alerts in lists:
            alerts[:] = [a for a in alerts if a["kind"] != "oom" or a["rank"] not in self._by_rank]

    def memory(self, rank: int, pid: int | None) -> tuple[WorkerMemory, float] | None:
        """The table's words for the rank's process `pid` (its latest OOM), and when it was;
        or None."""
        held = self._by_rank.get(rank)
        if held is None or held.pid != pid or "oom" not in held.alert:
            return None
        detail = held.alert["oom"]
        return {"oom": detail["note"], "snapshot": detail["snapshot"]}, held.alert["since"]


def _merged(old: OomRecord, new: OomRecord) -> OomRecord:
    out = old.copy()
    for k, v in new.items():
        if v is not None:
            out[k] = v  # type: ignore[literal-required]  # a key of OomRecord, from an OomRecord
    return out


def _procs(place: OomPlace, words: oom_words.OomWords) -> Sequence[GpuProcess]:
    """The GPU's processes at the last sample; with no sample, those torch's message listed."""
    if place.view is not None:
        return place.view["processes"]
    return [{"pid": pid, "rank": place.by_pid.get(pid), "child_of": None, "user": None, "cmd": None,
             "mem_bytes": mem, "visible": True, "sm_util": None} for pid, mem in words.processes]


def place(rank: int, record: OomRecord | None, cuda: CudaView | None, leaves: Sequence[GpuView],
          last_gpu: Mapping[int, DevKey], uuid_keys: Mapping[str, DevKey],
          by_pid: Mapping[int, int]) -> OomPlace:
    """Where the rank ran out (the GPU or MIG slice it was last seen on, else the one its record's
    or its CUDA view's UUID names) and what the watcher's last views (`leaves`: what ranks run on)
    knew of it; under the watcher's lock."""
    key = last_gpu.get(rank)
    uuid = (record["uuid"] if record is not None else None) or (cuda.get("uuid") if cuda else None)
    if key is None and uuid:
        key = uuid_keys.get(uuid)
    view = next((v for v in leaves if dev_key(v) == key), None)
    age = time.time() - view["processes_ts"] if view is not None and view["processes_ts"] else None
    where = view_name(view) if view is not None else oom_story.name(key)
    return OomPlace(key, where, view, age, dict(last_gpu), by_pid)


def user() -> str | None:
    """This user's name: a GPU process of another user's is another user's job."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
