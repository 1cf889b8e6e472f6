"""The OOM finding: what mpwatch knew when a rank ran out of CUDA memory, joined into one alert.
Pure; called by supervisor.gpu.oom_findings (on the channel hub's thread when the rank's OomRecord comes,
on the main thread when the rank dies of it).

It says what the rank asked for and what the GPU had free (the rank's record, else the words of
its message: supervisor.gpu.oom_words), the rank's own allocator (allocated, reserved, and
reserved but unallocated), who else held that GPU (or MIG slice) at the last sample and who they
are (another rank sharing it, another rank's stray context, a rank's child, another user's job,
a process of another container), where the snapshot is, and the one story that explains it,
whose hint it gives:
- fragmentation: the rank's own cache had the bytes asked for, in pieces too small for them
  (reserved - allocated >= the size asked; with no size, the fragmentation alert's thresholds):
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. Never said when the cache could not have
  held the allocation: then the memory was really taken, and expandable segments cannot help;
- others: the other processes on the GPU held more than the rank itself: who, and what to do;
- own: the rank itself held most of it: a smaller batch, checkpointing, mixed precision;
- unknown, said as what it cannot tell rather than a story: where the numbers cannot all be true
  (the others and the rank's own allocator hold more than the GPU has: a process the message names
  by its pid outside a container's namespace may be the rank itself; issue 40: 78 GiB "not ours"
  beside 76.5 GiB reserved by the rank on a 79 GiB GPU told "another job holds this GPU"), or where
  mpwatch never saw the rank use CUDA (no record, no allocator counters, on no GPU).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mpwatch.contract import DevKey, GpuAlert, GpuProcess, GpuView, OomRecord
from mpwatch.supervisor.gpu.alerts import (
    SET_DEVICE,
    AlertConfig,
    alert,
    describe_process,
    key_text,
    on,
    reserve_text,
    usable,
)
from mpwatch.supervisor.gpu.oom_words import OomWords
from mpwatch.text import fmt
from mpwatch.text.gpu_names import device_name

EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
HOLDERS_SAID = 4  # other processes named in the message (the rest summed)
ROUNDING = 0.02  # the share of the GPU by which the holders may exceed it (sizes rounded in the message)
Story = Literal["fragmentation", "others", "own", "unknown"]
_WHOSE = {"user": "(another user's)", "hidden": "(another container)"}
HolderKind = Literal["shares", "stray", "rank", "child", "own_child", "user", "outside", "hidden"]


@dataclass(frozen=True)
class OomFacts:
    """What mpwatch knew at a rank's OOM."""

    rank: int
    key: DevKey | None  # the GPU (or MIG slice) it ran out on (None: unknown)
    where: str  # "GPU 0", or a MIG slice's name
    view: GpuView | None  # that GPU's (or slice's) last view
    procs: Sequence[GpuProcess]  # the processes on it (the view's, with any torch's message named)
    age_s: float | None  # how old the process list was at the OOM
    record: OomRecord | None  # what the rank sent, merged by seq
    words: OomWords  # what its message said
    died: bool  # it died of it (else it caught it and went on)
    homes: Mapping[int, DevKey]  # rank -> its own GPU (or MIG slice)
    me: str | None  # this user's name: another user's process is another user's job
    history: bool  # --cuda-memory-history was on
    used_cuda: bool = True  # mpwatch saw the rank use CUDA: its record, its allocator's counters, a GPU


@dataclass(frozen=True)
class Numbers:
    tried: int | None
    free: int | None
    total: int | None
    allocated: int | None
    reserved: int | None

    @property
    def cached(self) -> int | None:
        if self.reserved is None or self.allocated is None:
            return None
        return max(self.reserved - self.allocated, 0)


@dataclass(frozen=True)
class Holder:
    pid: int
    rank: int | None  # the rank it belongs to (itself or as a child)
    mem_bytes: int
    kind: HolderKind
    who: str  # "rank 1", "rank 2's stray context", "pid 4242 (bob: python other.py)"
    role: str | None  # what it is to the run, when its name does not say


def numbers(record: OomRecord | None, words: OomWords) -> Numbers:
    """The rank's own record first (read at the OOM), else what its message said."""
    def pick(a: int | None, b: int | None) -> int | None:
        return a if a is not None else b
    if record is None:
        return Numbers(words.tried, words.free, words.total, words.allocated, words.reserved)
    return Numbers(pick(record["alloc"], words.tried), pick(record["free"], words.free),
                   pick(record["total"], words.total), pick(record["allocated"], words.allocated),
                   pick(record["reserved"], words.reserved))


def _kind(f: OomFacts, p: GpuProcess) -> HolderKind:
    if p["rank"] is not None:
        home = f.homes.get(p["rank"])
        return "shares" if home == f.key else "stray" if home is not None else "rank"
    if p["child_of"] is not None:
        return "own_child" if p["child_of"] == f.rank else "child"
    if not p["visible"]:
        return "hidden"
    return "user" if p["user"] and f.me and p["user"] != f.me else "outside"


def _label(f: OomFacts, p: GpuProcess, kind: HolderKind) -> tuple[str, str | None]:
    """(who, what it is to the run) of a process on the GPU."""
    r, pid = p["rank"], p["pid"]
    if kind == "shares":
        return f"rank {r}", "it runs on this GPU too"
    if kind == "stray":
        return f"rank {r}'s stray context", f"rank {r} runs on {name(f.homes.get(r or 0))}"
    if kind == "rank":
        return f"rank {r}", None
    if kind in ("child", "own_child"):
        return f"a child of rank {p['child_of']} (pid {pid})", None
    if kind == "hidden":
        return f"pid {pid}", "another container's: not visible here"
    return describe_process(p), "another user's job" if kind == "user" else "outside this run"


def name(key: DevKey | None) -> str:
    """A GPU's or a MIG slice's name, from its key."""
    if key is None:
        return device_name(None)
    return device_name(key[0], None if key[1] is None else {"gi": key[1], "ci": key[2], "profile": None})


def holders(f: OomFacts) -> tuple[list[Holder], int | None]:
    """The other processes on the GPU, the biggest first, and what the rank's own process held
    there (NVML's count; None when it was not listed)."""
    out: list[Holder] = []
    own: int | None = None
    for p in f.procs:
        mem = p["mem_bytes"] or 0
        if p["rank"] == f.rank:
            own = (own or 0) + mem
            continue
        kind = _kind(f, p)
        who, role = _label(f, p, kind)
        owner = p["rank"] if p["rank"] is not None else p["child_of"]
        out.append(Holder(p["pid"], owner, mem, kind, who, role))
    out.sort(key=lambda h: -h.mem_bytes)
    return out, own


def impossible(total: int | None, theirs: int, mine: int | None) -> bool:
    """The others and the rank itself held more than the GPU has: not all of it can be true."""
    return total is not None and mine is not None and theirs + mine > total * (1 + ROUNDING)


def untold(f: OomFacts, total: int | None, theirs: int, mine: int | None) -> str | None:
    """What mpwatch cannot tell of this OOM, in words; None where its numbers tell a story."""
    if not f.used_cuda:
        return (f"mpwatch never saw rank {f.rank} use CUDA (no allocator counters of its own, on no GPU): "
                "it cannot tell where it ran out nor who held the memory")
    if impossible(total, theirs, mine):
        return (f"these numbers cannot all be true: the other processes held {fmt.size_long(theirs)} and "
                f"rank {f.rank} {fmt.size_long(mine)}, more than {f.where}'s {fmt.size_long(total)} "
                f"(a process named by its pid outside a container's namespace may be rank {f.rank} itself): "
                "mpwatch cannot tell who held the memory")
    return None


def story(n: Numbers, others: Sequence[Holder], own: int | None, cfg: AlertConfig) -> Story:
    """Which of fragmentation, the others or the rank itself explains the OOM (module doc)."""
    cached = n.cached
    if cached is not None and n.reserved:
        if n.tried is not None:
            if cached >= n.tried:
                return "fragmentation"
        elif cached >= cfg.frag * n.reserved and cached >= cfg.frag_min:
            return "fragmentation"
    theirs = sum(h.mem_bytes for h in others if h.kind != "own_child")
    mine = own if own is not None else n.reserved
    if mine is None:
        return "others" if theirs else "unknown"
    return "others" if theirs > mine else "own"


# ------------------------------------------------------------------ words ----
def _asked(n: Numbers) -> str:
    out = f"it asked for {fmt.size_long(n.tried)}" if n.tried is not None else "an allocation failed"
    if n.free is not None:
        out += f" with {fmt.size_long(n.free)} free" + (f" of {fmt.size_long(n.total)}" if n.total else "")
    return out


def _others(f: OomFacts, others: Sequence[Holder]) -> str:
    """Who held the memory (first: at 80 columns the line is cut), and when the sample was."""
    v = f.view
    if v is None:
        return f"no sample showed what else was on {f.where}"
    late = f.age_s is not None and f.age_s >= 1
    when = "at the last sample" + (f", {f.age_s:.0f}s before" if late else "")
    room = usable(v)  # the driver's own reserve is no one's to use: said apart
    if v["mem_used"] is not None and room:
        used = fmt.size_long(v["mem_used"])
        when += f", {f.where} had {used} of {fmt.size_long(room)} used{reserve_text(v)}"
    if not others:
        return f"nothing else held memory on {f.where} ({when})"
    parts = [f"{h.who} held {fmt.size_long(h.mem_bytes)}" + (f" ({h.role})" if h.role else "")
             for h in others[:HOLDERS_SAID]]
    rest = others[HOLDERS_SAID:]
    if rest:
        parts.append(f"{len(rest)} more processes held {fmt.size_long(sum(h.mem_bytes for h in rest))}")
    return ", ".join(parts) + f" ({when})"


def _allocator(rank: int, n: Numbers) -> str:
    if n.allocated is None and n.reserved is None:
        return ""
    cached = n.cached
    unused = f" ({fmt.size_long(cached)} of it reserved but unallocated)" if cached is not None else ""
    return (f"rank {rank}'s allocator: {fmt.size_long(n.allocated)} allocated, "
            f"{fmt.size_long(n.reserved)} reserved{unused}")


def _snapshot(f: OomFacts) -> str:
    rec = f.record
    if rec is not None and rec["snapshot"]:
        return f"snapshot at the OOM: {rec['snapshot']}"
    if not f.history:
        return "no snapshot (--cuda-memory-history keeps one at an OOM)"
    why = rec["snapshot_error"] if rec is not None else None
    return f"no snapshot: {why}" if why else ""


def _short(h: Holder) -> str:
    """A holder in the table's few words."""
    if h.kind == "shares":
        return f"rank {h.rank} (sharing the GPU)"
    if h.kind == "stray":
        return f"rank {h.rank}'s stray context"
    if h.kind in ("rank", "child", "own_child"):
        return f"rank {h.rank}" + ("'s child" if h.kind != "rank" else "")
    return f"pid {h.pid} " + _WHOSE.get(h.kind, "(not ours)")


def _hint(s: Story, n: Numbers, top: Holder | None, told: str | None = None) -> str:
    if s == "fragmentation":
        return (f"its cache held {fmt.size_long(n.cached)} free, in pieces too small for the allocation: set "
                f"{EXPANDABLE} (growable segments), or torch.cuda.empty_cache() between phases")
    if s == "others" and top is not None:
        if top.kind in ("shares", "rank"):
            return f"give each rank its own GPU: {SET_DEVICE} before any CUDA call, and check " \
                "CUDA_VISIBLE_DEVICES"
        if top.kind == "stray":
            return f"in rank {top.rank}, call {SET_DEVICE} before any CUDA call: its context here is a stray"
        if top.kind in ("child", "own_child"):
            return "a rank's child process holds GPU memory: keep CUDA out of DataLoader workers and helpers"
        return "another job holds this GPU: run on a free one (CUDA_VISIBLE_DEVICES), or ask its owner"
    if s == "own":
        return "the rank itself holds the GPU: lower the batch size, use activation checkpointing or mixed " \
            "precision"
    if told is not None:
        return "see who holds the GPU where its processes' pids are the host's (nvidia-smi outside the " \
            "container), and the rank's stderr"
    return "lower the batch size, or free the memory held elsewhere on the GPU"


def _note(f: OomFacts, s: Story, n: Numbers, top: Holder | None, mine: int | None,
          told: str | None = None) -> str:
    """The rank's NOTE in the table: who held the memory, first."""
    asked = f"asked {fmt.size(n.tried)}" if n.tried is not None else "an allocation failed"
    free = f", {fmt.size(n.free)} free" if n.free is not None else ""
    head = f"CUDA OOM on {f.where}: "
    if told is not None:
        return head + f"who held the memory cannot be told; {asked}{free}"
    if s == "fragmentation":
        return head + f"{fmt.size(n.cached)} cached in pieces, {asked}; try expandable_segments"
    if s == "others" and top is not None:
        return head + f"{_short(top)} held {fmt.size(top.mem_bytes)}; {asked}{free}"
    if s == "own" and mine is not None:
        return head + f"rank {f.rank} itself held {fmt.size(mine)}; {asked}{free}"
    return head + asked + free


# --------------------------------------------------------------- finding ----
def finding(f: OomFacts, cfg: AlertConfig) -> GpuAlert:
    """The one OOM finding of a rank's OOM (its `since` is stamped by the caller)."""
    n = numbers(f.record, f.words)
    others, own = holders(f)
    base = own if own is not None else n.reserved
    mine = None if base is None else base + sum(h.mem_bytes for h in others if h.kind == "own_child")
    theirs = [h for h in others if h.kind != "own_child"]
    total = n.total if n.total is not None else (usable(f.view) or None) if f.view is not None else None
    told = untold(f, total, sum(h.mem_bytes for h in theirs), mine)
    s = story(n, theirs, mine, cfg) if told is None else "unknown"
    top = theirs[0] if theirs else None
    how = " and died of it" if f.died else ""  # live: whether it caught it, its state says
    parts = [told or "", _others(f, others) if f.used_cuda else "", _asked(n), _allocator(f.rank, n),
             _snapshot(f)]
    msg = f"rank {f.rank} ran out of CUDA memory on {f.where}{how}: " + "; ".join(p for p in parts if p)
    gpu, on_key = (f.key[0], key_text(f.key)) if f.key is not None else (None, None)
    a = alert("oom", f"oom:{f.rank}:{on_key}", gpu, f.rank, msg, "error", _hint(s, n, top, told),
              f"OOM rank {f.rank}")
    a["others"] = [{"pid": h.pid, "rank": h.rank, "mem_bytes": h.mem_bytes, "who": h.kind} for h in others]
    a["oom"] = {"story": s, "note": _note(f, s, n, top, mine, told), "died": f.died, "tried": n.tried,
                "free": n.free, "total": n.total, "allocated": n.allocated, "reserved": n.reserved,
                "cached": n.cached, "snapshot": f.record["snapshot"] if f.record is not None else None}
    return on(a, f.key)
