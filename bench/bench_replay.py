"""The replay of a finished run (`mpwatch show`): a run of 64 ranks and one hour, written by
bench/replay_gen.py through the supervisor's own writers at its real rates (a report event
a second per rank, a GPU tick a second for 8 GPUs, a failure and restart, a stall with its
dump and culprit, alerts), then:

- the size of that hour's events.jsonl and gpu.jsonl (and what a week would be without
  the caps that thin them: MPWATCH_EVENTS_MB, MPWATCH_GPU_TIMELINE_MB);
- opening it to the first screen: a fresh process (python -m bench.bench_replay --child DIR)
  builds the ReplaySource and runs the real ReplayApp headless (Textual's run_test,
  160x48) until the first status is on screen. Two figures: from the process's spawn (what
  a user waits: interpreter, imports, index, first draw) and from the open call (the
  replay's own part). Side by side, alternated, with `mpwatch summary DIR` on the same
  directory (the post-mortem reader, which parses every event): the ratio says what the
  replay's index saves;
- stepping the cursor: in the same process, keys (`,` and `[`, as a user steps back from
  the end) posted to the app as the terminal driver posts them, to the new moment's status
  drawn (Pilot's press is not used: it waits for the app to be idle, which it is not while
  the report index is built in its idle time), and the source's rebuild of a status alone
  at every event of the run.
Targets (issue 15): first screen under 1 s, a step under 100 ms.
"""
from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import measure
from bench.harness import row

TARGET_OPEN_S = 1.0
TARGET_STEP_MS = 100.0
WEEK = 24 * 7


def _child(d: str) -> None:
    """In the fresh process: open, first screen, then the steps; one JSON line at the end."""
    t_spawned = time.perf_counter()
    from textual import events

    from mpwatch.sources.replay import ReplaySource
    from mpwatch.tui.render import glyphs
    from mpwatch.tui.replay_app import ReplayApp

    async def main() -> dict:
        t0 = time.perf_counter()
        src = ReplaySource(d)
        t_index = time.perf_counter() - t0
        app = ReplayApp(src, glyphs=glyphs.UNICODE, notices=False)
        out: dict = {"index_s": t_index, "imports_s": t0 - t_spawned}
        moved: list[float] = []  # when the last key's action moved the cursor (empty: none pending)
        action_ms: list[float] = []
        act, apply = app.action_cursor, app.apply_status

        def action_cursor(how: str, arg: int) -> None:  # the key's action: when the app got the key
            t, moves = time.perf_counter(), app.moves
            act(how, arg)
            if app.moves > moves:
                moved[:] = [t]

        def apply_status(status) -> None:  # the moment's status drawn
            apply(status)
            if moved and app.shows_cursor():
                action_ms.append((time.perf_counter() - moved.pop()) * 1000)
        app.action_cursor, app.apply_status = action_cursor, apply_status
        async with app.run_test(size=(160, 48)) as pilot:
            while app.snapshots == 0:
                await pilot.pause(0.001)
            out["open_s"] = time.perf_counter() - t0
            print("FIRST", flush=True)
            steps = []
            keys = [("comma", ",")] * 20 + [("left_square_bracket", "[")] * 6 + [("home", None), ("end", None)]
            for key, char in keys:
                before, moves = app.snapshots, app.moves
                t = time.perf_counter()
                app.post_message(events.Key(key, char))  # as the terminal driver delivers a key
                while app.moves == moves and time.perf_counter() - t < 5.0:
                    await asyncio.sleep(0.0005)
                if app.moves == moves:
                    continue  # at an edge: nothing to show
                while not (app.shows_cursor() and app.snapshots > before):
                    await asyncio.sleep(0.0005)
                steps.append(time.perf_counter() - t)
            out["key_steps_ms"] = [s * 1000 for s in steps]
            out["action_steps_ms"] = action_ms
            rebuilds = []
            for seq in range(1, len(src.events_list) + 1):
                src.move("seq", seq)
                t = time.perf_counter()
                src.status(12)
                rebuilds.append(time.perf_counter() - t)
            out["rebuild_ms"] = [s * 1000 for s in rebuilds]
            import resource

            out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            app.exit()
        return out

    print(json.dumps(asyncio.run(main())), flush=True)


def _open(d: Path) -> tuple[float, dict]:
    """Spawn the child: (seconds from spawn to its first screen, what it measured)."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "bench.bench_replay", "--child", str(d)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=measure.clean_env())
    assert p.stdout is not None
    first = p.stdout.readline()
    t_first = time.monotonic() - t0
    rest = p.stdout.read()
    err = p.stderr.read() if p.stderr else ""
    if p.wait(300) != 0 or not first.startswith("FIRST"):
        raise RuntimeError(f"the replay child failed: {err.strip()[-300:]}")
    return t_first, json.loads(rest.strip().splitlines()[-1])


def _summary(d: Path) -> float:
    t0 = time.monotonic()
    res = subprocess.run([*measure.mpwatch_cmd(), "summary", str(d)], capture_output=True, text=True,
                         env=measure.clean_env(), timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"mpwatch summary failed: {res.stderr.strip()[-300:]}")
    return time.monotonic() - t0


def _mb(n: int) -> float:
    return n / (1 << 20)


def run(quick: bool = False) -> list[dict]:
    from bench.replay_gen import generate

    ranks, seconds, gpus = (8, 300, 2) if quick else (64, 3600, 8)
    reps = 1 if quick else 5
    what = f"{ranks} ranks, {seconds // 60} min, {gpus} GPUs"
    with measure.scratch("replay") as tmp:
        t0 = time.monotonic()
        d = generate(tmp / "run", ranks, seconds, gpus)
        gen_s = time.monotonic() - t0
        ev, gp = (d / "events.jsonl").stat().st_size, (d / "gpu.jsonl").stat().st_size
        with open(d / "events.jsonl", "rb") as f:
            lines = sum(1 for _ in f)
        opens, runs, summaries = [], [], []
        _summary(d)  # the page cache warm for both sides
        for _, who in measure.alternated(reps, ["show", "summary"]):
            if who == "show":
                t_first, got = _open(d)
                opens.append(t_first)
                runs.append(got)
            else:
                summaries.append(_summary(d))
    first = measure.median(opens)
    own = measure.median([r["open_s"] for r in runs])
    index = measure.median([r["index_s"] for r in runs])
    keys = [s for r in runs for s in r["key_steps_ms"]]
    actions = [s for r in runs for s in r["action_steps_ms"]]
    rebuilds = [s for r in runs for s in r["rebuild_ms"]]
    rss = measure.median([r["maxrss_mb"] for r in runs])
    per_hour = 3600 / seconds
    cmd = f"python -m bench.replay_gen DIR {ranks} {seconds}; mpwatch show DIR"
    note_gen = f"generated in {gen_s:.0f} s by bench/replay_gen.py ({lines} lines)"
    return [
        row(f"Replay: events.jsonl of one hour ({ranks} ranks)", cmd, round(_mb(ev) * per_hour, 1), unit="MB",
            note=f"{note_gen}; a week at this rate: {_mb(ev) * per_hour * WEEK / 1024:.1f} GB without the cap; "
                 "capped at MPWATCH_EVENTS_MB (default 128): older report events thinned, never the others"),
        row(f"Replay: gpu.jsonl of one hour ({gpus} GPUs, {ranks} ranks)", cmd, round(_mb(gp) * per_hour, 1),
            unit="MB", note=f"a week at this rate: {_mb(gp) * per_hour * WEEK / 1024:.1f} GB without the cap; "
                            "capped at MPWATCH_GPU_TIMELINE_MB (default 64)"),
        row(f"Replay: command to first screen ({what})", cmd, first, measure.median(summaries),
            alt_name="mpwatch summary DIR, to exit", unit="s", target=f"< {TARGET_OPEN_S:g} s",
            ok=first < TARGET_OPEN_S if first is not None else None,
            note=f"median of {reps}, alternated with summary; a fresh process each (python -m bench.bench_replay "
                 f"--child DIR: imports, index, the real ReplayApp headless at 160x48 until the first status is "
                 f"drawn); of it, the open call to the first screen {own:.3f} s (the index {index:.3f} s); "
                 f"peak RSS {rss:.0f} MB"),
        row(f"Replay: a step of the cursor, key to screen ({what})", cmd, statistics.median(keys),
            unit="ms", target=f"< {TARGET_STEP_MS:g} ms", ok=statistics.median(keys) < TARGET_STEP_MS,
            note=f"median of {len(keys)} key presses (, back from the end, [ to the previous failure/stall/"
                 f"restart/alert, Home, End), each posted to the app as the terminal driver posts a key, until the "
                 f"new moment's status is drawn; max {max(keys):.0f} ms (the first keys come while the report "
                 f"index is built in the app's idle time); from the key's action to the status drawn: median "
                 f"{statistics.median(actions):.0f} ms, max {max(actions):.0f} ms"),
        row(f"Replay: rebuilding the status at a moment ({what})", cmd, statistics.median(rebuilds), unit="ms",
            target=f"< {TARGET_STEP_MS:g} ms", ok=max(rebuilds) < TARGET_STEP_MS,
            note=f"the source alone, at each of the run's {len(rebuilds) // max(1, len(runs))} notable events; "
                 f"max {max(rebuilds):.1f} ms"),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        from bench.harness import print_table

        print_table(run(quick="--quick" in sys.argv))
