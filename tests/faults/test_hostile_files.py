"""Hostile and damaged files in a run directory (issue 22, items 4, 5, 7 and 11): a FIFO, a
link, a folder or a huge line where a file should be, escape sequences and impossible values
inside: every reader (`summary`, `ls --all`, `ctl logs`, the replay of `show`) answers at once,
bounded, with a note or one line, prints nothing a terminal would obey, and never a traceback.
Each case damages a copy of a real run (tests/recorded_runs.py), as tests/cli/test_cut_short.py does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.conftest import FAULTS
from tests.faults.hostile import no_traceback
from tests.helpers import FIXTURES, MPWATCH, ROOT, mpwatch, one_line_error, wait_for

pytestmark = pytest.mark.timeout(600)

ANSWER_S = 60  # a reader that blocks is killed here and the case fails
ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"  # retitle the window, clear the screen, turn red
REPLAY = """
import json, sys
from mpwatch.sources.replay import ReplaySource
src = ReplaySource(sys.argv[1])
src.read_all()
for how in ("seq", "end"):
    src.move(how, 1)
    st = src.status()
    src.events(0)
    for w in st["workers"]:
        src.history(w["rank"])
        src.logs(w["rank"], "stderr", 5)
    src.gpu_timeline(600)
print(json.dumps({"notes": src.notes, "ranks": [w["rank"] for w in st["workers"]]}))
"""


def run_quick(*args, cwd=None) -> subprocess.CompletedProcess[str]:
    """An mpwatch command that must answer within ANSWER_S (a hang fails the case)."""
    return mpwatch(*args, cwd=cwd, timeout=ANSWER_S)


def replay(d: Path) -> dict:
    """The replay of `show` read through at its first and last moment, in a process of its own."""
    res = subprocess.run([sys.executable, "-c", REPLAY, str(d)], capture_output=True, text=True, timeout=ANSWER_S,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


FIFO_FILES = ["run.json", "final.json", "events.jsonl", "gpu.jsonl", "rank-0/stdout.log", "rank-0/stderr.log"]


@pytest.mark.parametrize("name", FIFO_FILES)
def test_a_fifo_in_place_of_a_file_never_blocks_a_reader(crashed, tmp_path, name):
    d = crashed.copy(tmp_path)
    fifo(d / name)
    s = run_quick("summary", d)
    assert s.returncode == 0, s.stderr
    if name.endswith(".json") or name.endswith(".jsonl"):
        assert f"{name} is unreadable (not a regular file)" in s.stdout or f"{name} is not" in s.stdout, s.stdout
    assert run_quick("ls", "--all", tmp_path).returncode == 0
    for args in (["0"], ["0", "--stderr"], ["0", "--lines", "5"]):
        logs = run_quick("ctl", "--run", d, "logs", *args)
        if name.startswith("rank-0/") and ("--stderr" in args) == name.endswith("stderr.log"):
            one_line_error(logs, "is not a regular file")
        else:
            assert logs.returncode == 0, logs.stderr
    got = replay(d)
    if name != "rank-0/stdout.log" and name != "rank-0/stderr.log":
        assert any(name in n for n in got["notes"]), got["notes"]


def test_a_fifo_stack_dump_is_not_listed_or_read(crashed, tmp_path):
    d = crashed.copy(tmp_path)
    (d / "rank-0" / "stacks").mkdir(exist_ok=True)
    fifo(d / "rank-0" / "stacks" / "20300101-000000-000.txt")
    s = run_quick("summary", d, "--json")
    assert s.returncode == 0 and "rank-0/stacks/20300101-000000-000.txt" not in json.loads(s.stdout)["files"]
    replay(d)


def test_links_in_a_run_directory_are_not_followed(crashed, tmp_path):
    """run.json pointing at another run's, a rank's log pointing at a file elsewhere."""
    d = crashed.copy(tmp_path)
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({"run_id": "someone-elses", "script": "other.py", "started": 1.0}))
    (d / "run.json").unlink()
    (d / "run.json").symlink_to(other)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET LINE\n")
    (d / "rank-1" / "stdout.log").unlink()
    (d / "rank-1" / "stdout.log").symlink_to(secret)
    s = json.loads(run_quick("summary", d, "--json").stdout)
    assert s["listing"]["run_id"] == crashed.run_id  # from the other files, not the link
    assert any("run.json is unreadable (a link (never followed))" in n for n in s["notes"]), s["notes"]
    one_line_error(run_quick("ctl", "--run", d, "logs", "1"), "is not a regular file")
    got = replay(d)
    assert "SECRET" not in json.dumps(got)


def test_a_worker_that_leaves_a_fifo_for_its_stderr_never_blocks_the_supervisor(headless):
    """The supervisor reads a rank's stderr tail when it exits (main thread): a FIFO there
    must not hold the run, its stop or its end."""
    run = headless(FAULTS / "fifo_stderr.py", n=1)
    assert run.wait_exit(timeout=60) == 1
    ev = run.events("worker_exited")
    assert ev and ev[-1]["exit_code"] == 3 and ev[-1]["stderr_tail"] == []


HUGE = 1 << 30  # a 1 GiB line (sparse: no disk needed, the bytes read back as NULs)
MAX_RSS_MB = 400  # what reading past it may cost: far below the line itself


def peak_rss_mb(*args) -> tuple[subprocess.CompletedProcess[str], float]:
    """An mpwatch command, and the peak resident memory of its process in MB."""
    code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, file=sys.stderr); "
            "sys.exit(r.returncode)")
    res = subprocess.run([sys.executable, "-c", code, *MPWATCH, *map(str, args)], capture_output=True, text=True,
                         timeout=300)
    *err, peak = res.stderr.splitlines()
    return subprocess.CompletedProcess(res.args, res.returncode, res.stdout, "\n".join(err)), float(peak)


def test_a_huge_line_is_read_past_with_bounded_memory(crashed, tmp_path):
    d = crashed.copy(tmp_path)
    events = d / "events.jsonl"
    size = events.stat().st_size
    with open(events, "r+b") as f:  # the run's events, then a 1 GiB line of NULs, then one more event
        f.truncate(size + HUGE)
        f.seek(size + HUGE)
        f.write(b"\n" + json.dumps({"ts": 2e9, "event": "stopping", "rank": None, "why": "after"}).encode() + b"\n")
    res, peak = peak_rss_mb("summary", d, "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert "events.jsonl: 1 line(s) longer than 4 MiB skipped unread" in s["notes"] and s["stopped"] == "after"
    assert [r["rank"] for r in s["ranks"]] == [0, 1]
    assert peak < MAX_RSS_MB, f"summary peaked at {peak:.0f} MB for a 1 GiB line"
    res, peak = peak_rss_mb("ctl", "--run", d, "logs", "0", "--stderr")
    assert res.returncode == 0 and "ZeroDivisionError" in res.stdout
    assert peak < MAX_RSS_MB, f"ctl logs peaked at {peak:.0f} MB (it needs no events)"


def test_a_log_line_without_end_is_followed_in_pieces(tmp_path):
    """`ctl logs --follow` holds at most a piece of a line without a newline."""
    from mpwatch.cli import logs

    assert logs.MAX_PARTIAL <= 1 << 20


def test_escape_sequences_in_a_runs_files_are_shown_harmless(crashed, tmp_path):
    """summary and ls --all print what run.json, final.json and events.jsonl say with every
    control character shown as '?'."""
    d = crashed.copy(tmp_path)
    info = json.loads((d / "run.json").read_text())
    info["script"] = f"/x/{ESC}train.py"
    info["args"] = [f"--lr={ESC}"]
    info["run_id"] = f"id{ESC}"
    (d / "run.json").write_text(json.dumps(info))
    final = json.loads((d / "final.json").read_text())
    for w in final["workers"]:
        w["cause"] = f"exit 1{ESC}"
    (d / "final.json").write_text(json.dumps(final))
    with open(d / "events.jsonl", "a") as f:
        f.write(json.dumps({"ts": info["started"] + 1, "event": "alert", "rank": 0, "kind": f"k{ESC}",
                            "message": f"bad{ESC}"}) + "\n")
    for args in (["summary", d], ["ls", "--all", tmp_path], ["summary", d, "--json"]):
        res = run_quick(*args)
        assert res.returncode == 0, res.stderr
        assert "\x1b" not in res.stdout and "\x07" not in res.stdout, (args, res.stdout)
    assert "?]0;pwned??[2J?[31m" in run_quick("summary", d).stdout


def test_an_error_line_shows_a_hostile_name_harmless(tmp_path):
    res = run_quick("summary", f"no{ESC}such", cwd=tmp_path)
    one_line_error(res, "no such run: no?]0;pwned")
    assert "\x1b" not in res.stderr


def test_a_childs_process_title_reaches_ctl_status_harmless(headless):
    run = headless(FIXTURES / "escape_title.py", n=1)
    wait_for(lambda: any(c["cmd"] and "pwned" in c["cmd"] for w in run.status()["workers"] for c in w["children"]),
             60, what="the child with the hostile title in the status")
    text = run.ctl("status").stdout  # the child's line names it (text.children), never its title raw
    assert "child process of rank 0, pid " in text and "\x1b" not in text and "\x07" not in text, text
    assert any("\x1b" in c["cmd"] for c in run.status()["workers"][0]["children"])  # the data is kept as it is
    run.ctl("stop")
    assert run.wait_exit(60) == 1


DAMAGED = [
    ("final.json without gpus", "final.json", lambda v: v.pop("gpus")),
    ("final.json with restarts 'z'", "final.json",
     lambda v: [w.update(restarts="z") for w in v["workers"]] + [v["run"].update(restarts=None)]),
    ("final.json run without counts", "final.json", lambda v: v["run"].pop("counts")),
    ("final.json run restarts 'z'", "final.json", lambda v: v["run"].update(restarts="z")),
    ("run.json finished 1e999", "run.json", None),
    ("run.json started Infinity", "run.json", None),
    ("an event at ts Infinity", "events.jsonl", None),
    ("events.jsonl a directory", "events.jsonl", None),
    ("run.json restarts 'z'", "run.json", lambda v: v.update(restarts="z", options={"nprocs": "z", "grace": "z"})),
]


def damage(d: Path, case: str, name: str, change) -> None:
    path = d / name
    if change is not None:
        value = json.loads(path.read_text())
        change(value)
        path.write_text(json.dumps(value))
    elif case == "run.json finished 1e999":
        path.write_text(path.read_text().rstrip().rstrip("}") + ', "finished": 1e999}')
    elif case == "run.json started Infinity":
        path.write_text(path.read_text().rstrip().rstrip("}") + ', "started": Infinity}')
    elif case == "an event at ts Infinity":
        with open(path, "a") as f:
            f.write('{"ts": Infinity, "event": "stalled", "rank": 0}\n{"ts": 1e999, "event": "alert", "rank": 0}\n')
    elif case == "events.jsonl a directory":
        path.unlink()
        path.mkdir()


@pytest.mark.parametrize("case,name,change", DAMAGED, ids=[c[0] for c in DAMAGED])
def test_damaged_values_are_read_around_never_a_traceback(crashed, tmp_path, case, name, change):
    d = crashed.copy(tmp_path)
    damage(d, case, name, change)
    for args in (["summary", d], ["summary", d, "--json"], ["ls", "--all", tmp_path], ["ctl", "--run", d, "logs", "0"]):
        res = run_quick(*args)
        assert res.returncode == 0, (args, res.stderr)
        no_traceback(res)
    replay(d)
    # `show`: the TUI itself, stepped through every moment and view of what is left
    res = subprocess.run([sys.executable, "-c", TUI, str(d), str(ANSWER_S)], capture_output=True, text=True,
                         timeout=ANSWER_S * 2, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


TUI = """
import asyncio, sys, time
from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.render import glyphs
from mpwatch.tui.replay_app import ReplayApp

async def main():
    app = ReplayApp(ReplaySource(sys.argv[1]), glyphs=glyphs.UNICODE, notices=False)
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + float(sys.argv[2])  # the test's own limit kills us past it anyway
        while not app.snapshots and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert app.snapshots, "no first snapshot"
        for k in ("home", "right_square_bracket", "left_square_bracket", "full_stop", "end", "e", "escape", "g",
                  "escape", "l", "escape", "enter", "escape"):
            await pilot.press(k)
        await app.workers.wait_for_complete()  # what the keys started: the screens' loads
        await pilot.pause()  # and what those posted
    assert app.return_value is None
    print("ok")

asyncio.run(main())
"""


BAD_SETTINGS = [("MPWATCH_EVENTS_MB", "inf"), ("MPWATCH_EVENTS_MB", "1e400"), ("MPWATCH_GPU_TIMELINE_MB", "inf"),
                ("MPWATCH_NODE_LOST_S", "abc"), ("MPWATCH_SSH", "ssh -o 'x"), ("MPWATCH_MAX_WORKERS", "0")]


@pytest.mark.parametrize("var,value", BAD_SETTINGS, ids=[f"{v}={x}" for v, x in BAD_SETTINGS])
def test_a_bad_setting_is_one_line_before_anything_starts(tmp_path, var, value):
    res = mpwatch("--headless", "-n", "1", FIXTURES / "reporter.py", cwd=tmp_path, env={**os.environ, var: value})
    one_line_error(res, f"{var}=")
    assert not (tmp_path / "mpwatch-runs").exists()
