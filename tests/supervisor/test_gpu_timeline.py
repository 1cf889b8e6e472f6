"""The GPU timeline: the in-memory hour behind `gpu_timeline`, and gpu.jsonl kept under its
cap by thinning (said in the file), with disk errors that never raise."""
import contextlib
import json
from itertools import pairwise
from pathlib import Path

import pytest

from mpwatch.rundir.layout import GPU_JSONL
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor.gpu.timeline import MAX_TICKS, GpuTimeline
from tests.helpers import mount_tmpfs, umount

T0 = 1_800_000_000.0


def tick(ts: float, used: int = 1000) -> dict:
    return {"ts": ts, "gpus": [{"index": 0, "mem_used": used, "mem_total": 10_000, "util_gpu": 50, "outside": 0}],
            "ranks": [{"rank": 0, "gpu": 0, "nvml": used, "allocated": used // 2, "reserved": used // 2}]}


def mark(ts: float, i: int = 0) -> dict:
    return {"ts": ts, "gpu": 0, "kind": "proc_started", "rank": None, "pid": 1000 + i, "text": f"pid {1000 + i}"}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_one_tick_a_second_is_kept_and_windows_are_downsampled():
    tl = GpuTimeline(None, 1 << 20)
    kept = [tl.tick(tick(T0 + i * 0.25)) for i in range(4 * 3600)]  # a poller at 4 Hz for an hour
    assert sum(kept) == 3600
    now = T0 + 3600
    two_min, _ = tl.window(120, now=now)
    assert 118 <= len(two_min) <= 121 and all(b["ts"] - a["ts"] >= 0.95 for a, b in pairwise(two_min))
    hour, _ = tl.window(3600, now=now)
    assert len(hour) <= MAX_TICKS and hour[-1]["ts"] == two_min[-1]["ts"]  # the latest is always in
    assert hour[0]["ts"] < T0 + 60 and [t["ts"] for t in hour] == sorted(t["ts"] for t in hour)
    ten, _ = tl.window(600, now=now)
    assert MAX_TICKS - 1 <= len(ten) <= MAX_TICKS and ten[0]["ts"] >= now - 600


def test_marks_come_with_their_window():
    tl = GpuTimeline(None, 1 << 20)
    for i in range(10):
        tl.mark(mark(T0 + i * 60, i))
    _, marks = tl.window(300, now=T0 + 9 * 60)
    assert [m["pid"] for m in marks] == [1004, 1005, 1006, 1007, 1008, 1009]


def test_the_file_is_kept_under_its_cap_and_says_what_was_thinned(tmp_path):
    path = tmp_path / GPU_JSONL
    tl = GpuTimeline(RunStore(tmp_path, Settings()), 16 * 1024)
    for i in range(2000):
        tl.tick(tick(T0 + i, used=i))
        if i % 100 == 0:
            tl.mark(mark(T0 + i, i))
    recs = lines(path)
    assert path.stat().st_size <= 16 * 1024 and tl.thinned >= 1
    ticks = [r for r in recs if "gpus" in r]
    notes = [r["thinned"] for r in recs if "thinned" in r]
    assert notes and all(n["ticks_after"] < n["ticks_before"] and n["from"] == T0 for n in notes)
    assert ticks[0]["ts"] == T0  # thinned, never dropped: the first second is still there
    assert ticks[-1]["ts"] == T0 + 1999 and ticks[-2]["ts"] == T0 + 1998  # recent detail kept
    assert len([r for r in recs if "kind" in r]) == 20  # marks are not thinned while they fit
    assert [r["ts"] for r in recs if "thinned" not in r] == sorted(r["ts"] for r in recs if "thinned" not in r)


def test_a_flood_of_marks_drops_the_oldest_and_counts_them(tmp_path):
    path = tmp_path / GPU_JSONL
    tl = GpuTimeline(RunStore(tmp_path, Settings()), 8 * 1024)
    for i in range(1000):
        tl.mark(mark(T0 + i, i))
    recs = lines(path)
    assert path.stat().st_size <= 8 * 1024
    dropped = sum(r["thinned"]["marks_dropped"] for r in recs if "thinned" in r)
    kept = [r["pid"] for r in recs if "kind" in r]
    assert dropped > 0 and kept[-1] == 1999 and len(kept) + dropped == 1000


def test_disk_errors_never_raise_and_memory_goes_on(tmp_path):
    """A run directory that is gone, and one on a full file system (a 1 MiB tmpfs filled up;
    a link to /dev/full would be refused as a link, never written through)."""
    full = tmp_path / "full"
    why = mount_tmpfs(full)
    if why:
        pytest.skip(why)
    try:
        with open(full / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"x" * 65536)
        for run_dir in (tmp_path / "no" / "such" / "dir", full):
            path = run_dir / GPU_JSONL
            tl = GpuTimeline(RunStore(run_dir, Settings()), 1 << 20)
            for i in range(200):  # past what the file system's last blocks hold
                tl.tick(tick(T0 + i))
                tl.mark(mark(T0 + i))
            assert tl.error and str(path) in tl.error
            ticks, marks = tl.window(600, now=T0 + 200)
            assert len(ticks) == 200 and len(marks) == 200
    finally:
        umount(full)
