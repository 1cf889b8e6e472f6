"""Soak: 16 ranks reporting 50 times a second under a headless supervisor, with the TUI
attached (`mpwatch attach` in a 160x48 tmux pane, as bench/bench_tui.py runs it), for an hour;
both processes' memory (psutil RSS and USS) is read every minute, and must stay flat.

The growth is the least-squares slope of the RSS readings over the second half of the soak:
what is bounded by design (caches, histories) fills to its cap in the first minutes, a leak
goes on growing after; the notes give every reading, the growth to the second half, and the
slope from minute 1. Without --quick the
same soak runs at once, side by side, on the code before the TUI's growth was bounded
(BEFORE_FIX, through measure.tree_at), so both see the same machine.

Duration: 60 minutes, 5 with --quick; BENCH_SOAK_MINUTES=N sets another (the rows say it).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import measure
from bench.bench_tui import Pane, _tui_process
from bench.harness import row

RANKS = 16
RATE = 50.0
MINUTES, QUICK_MINUTES = 60, 5
TARGET_MIB_MIN = 0.05  # flat: under 3 MiB an hour
BEFORE_FIX = "43fffd1"  # the TUI's growth unbounded (issue 19)
MiB = float(1 << 20)

REPORTER = f'''
import time
import mpwatch
period, step, next_t = {1.0 / RATE!r}, 0, time.monotonic()
while True:
    with mpwatch.phase("compute"):
        pass
    mpwatch.report(step=step, loss=1.0 / (step + 1))
    step += 1
    next_t += period
    delay = next_t - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    elif delay < -1.0:
        next_t = time.monotonic()
'''


@dataclass
class Side:
    """One soak: a supervisor, its workers, and the TUI attached to it."""

    name: str
    tree: Path | None  # None: this checkout
    headless: measure.Headless | None = None
    pane: Pane | None = None
    supervisor: psutil.Process | None = None
    tui: psutil.Process | None = None
    readings: list[dict[str, float]] = field(default_factory=list)

    def read(self, minute: float) -> None:
        r: dict[str, float] = {"min": minute}
        for who, p in (("sup", self.supervisor), ("tui", self.tui)):
            try:
                m = p.memory_full_info() if p is not None else None
            except psutil.Error:
                m = None
            if m is not None:
                r[f"{who}_rss"], r[f"{who}_uss"] = m.rss / MiB, m.uss / MiB
        self.readings.append(r)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares MiB per minute."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def growth(side: Side, key: str, since: float) -> float | None:
    """MiB per minute of `key` over the readings from minute `since` on."""
    return slope([(r["min"], r[key]) for r in side.readings if r["min"] >= since and key in r])


def half(side: Side) -> float:
    return side.readings[-1]["min"] / 2 if side.readings else 0.0


def warmup(side: Side, key: str) -> str:
    """MiB taken from the start to the second half: caches and histories filling to their caps."""
    early = [r[key] for r in side.readings if key in r and r["min"] <= half(side)]
    return f"{early[-1] - early[0]:+.1f}" if len(early) > 1 else "-"


@contextlib.contextmanager
def started(side: Side, d: Path) -> Iterator[Side]:
    """The side's run and TUI up, every rank reporting; everything gone after."""
    extra = {"PYTHONPATH": str(side.tree)} if side.tree else {}
    script = measure.write_script(d, "reporter.py", REPORTER)
    with measure.Headless(d, script, n=RANKS, opts=["--grace", "2"], env=measure.clean_env(**extra)) as h:
        side.headless = h
        measure.wait_for(lambda: sum(w["step"] is not None for w in h.status()["workers"]) == RANKS,
                         120, what=f"{RANKS} ranks reporting ({side.name})")
        side.supervisor = psutil.Process(h.proc.pid)
        side.pane = Pane()
        env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
               "TERM": "xterm-256color", **{k: v for k, v in os.environ.items() if k == "XDG_RUNTIME_DIR"}, **extra}
        try:
            side.pane.start([*measure.mpwatch_cmd(), "attach", str(h.run_dir)], env)
            side.pane.wait(lambda s: f"{RANKS} workers" in s and "sort: rank" in s, 90, f"the TUI ({side.name})")
            pane_pid = int(side.pane.tmux("list-panes", "-t", "b", "-F", "#{pane_pid}").split()[0])
            side.tui = measure.wait_for(lambda: _tui_process(pane_pid, "attach"), 10, what="the TUI process")
            yield side
        finally:
            side.pane.kill()


def soak(sides: list[Side], minutes: int) -> None:
    """Every side started, then read at each minute's mark for `minutes` minutes."""
    with contextlib.ExitStack() as stack:
        for s in sides:
            stack.enter_context(started(s, stack.enter_context(measure.scratch(f"soak-{s.name}"))))
        t0 = time.monotonic()
        for m in range(minutes + 1):
            time.sleep(max(0.0, t0 + 60 * m - time.monotonic()))
            for s in sides:
                s.read(m)
            print(f"   soak minute {m}: " + "; ".join(
                f"{s.name} TUI {s.readings[-1].get('tui_rss', 0):.1f} MiB, supervisor "
                f"{s.readings[-1].get('sup_rss', 0):.1f} MiB" for s in sides), file=sys.stderr, flush=True)


def series(side: Side, key: str) -> str:
    return " ".join(f"{r[key]:.1f}" for r in side.readings if key in r)


def told(s: Side, key: str) -> str:
    g = growth(s, key, 1.0)
    return (f"RSS each minute {series(s, key)} MiB; {warmup(s, key)} MiB to the second half; "
            f"{'-' if g is None else f'{g:.3f}'} MiB/min from minute 1")


def rows_for(now: Side, before: Side | str, minutes: int) -> list[dict]:
    out = []
    what = f"{RANKS} ranks x {RATE:g} reports/s, TUI attached, {minutes} min"
    base = before if isinstance(before, Side) else None
    for who, label in (("tui", "TUI (mpwatch attach)"), ("sup", "supervisor")):
        key = f"{who}_rss"
        mine = growth(now, key, half(now))
        old = growth(base, key, half(base)) if base else None

        out.append(row(
            f"Soak: {label} memory growth, second half ({what})", f"python -m bench --only soak  # {what}",
            mpwatch=None if mine is None else round(mine, 3), alternative=None if old is None else round(old, 3),
            alt_name=f"before the fix ({BEFORE_FIX}), side by side" if base else None,
            unit="MiB/min", target=f"< {TARGET_MIB_MIN:g}", ok=None if mine is None else mine < TARGET_MIB_MIN,
            note=f"least-squares slope of RSS over the second half (a leak grows there; bounded caches fill "
                 f"before it); {told(now, key)}; USS {series(now, f'{who}_uss')} MiB"
                 + (f"; before the fix: {told(base, key)}" if base else f"; no baseline: {before}")))
    return out


def run(quick: bool = False) -> list[dict]:
    if shutil.which("tmux") is None:
        return [row("Soak", note="skipped: tmux is not installed")]
    minutes = int(os.environ.get("BENCH_SOAK_MINUTES") or (QUICK_MINUTES if quick else MINUTES))
    now = Side("now", None)
    if quick:
        soak([now], minutes)
        return rows_for(now, "not run with --quick", minutes)
    with measure.tree_at(BEFORE_FIX) as tree:
        if isinstance(tree, str):
            soak([now], minutes)
            return rows_for(now, tree, minutes)
        before = Side("before", tree)
        soak([now, before], minutes)
        return rows_for(now, before, minutes)


if __name__ == "__main__":
    import json

    for r in run(quick="--quick" in sys.argv):
        print(json.dumps(r))
