"""Run directories cut short or garbled the ways disks, kills and people leave them: every
post-mortem command reads what is there, says what is missing, and never shows a
traceback; a path that is no run directory is one line and exit code 2. Each case cuts a
copy of a real run (tests/recorded_runs.py)."""
from __future__ import annotations

import json
import shutil

import pytest

from mpwatch.rundir import reader
from tests.cli.conftest import summary
from tests.helpers import mpwatch, one_line_error

pytestmark = pytest.mark.timeout(300)


def tear_last_line(d):
    data = (d / "events.jsonl").read_bytes()
    (d / "events.jsonl").write_bytes(data[:-1 - len(data.rstrip(b"\n").rsplit(b"\n", 1)[1]) // 2])


def garble_middle(d):
    lines = (d / "events.jsonl").read_bytes().splitlines(keepends=True)
    lines[2:2] = [b"\x00\xff not json at all\n", b'["a list"]\n', b'{"ts": "noon", "event": 3}\n']
    (d / "events.jsonl").write_bytes(b"".join(lines))


def write(name, data: bytes):
    return lambda d: (d / name).write_bytes(data)


GARBAGE = bytes(range(256)) * 3  # 3 newlines (and 3 carriage returns): 4 lines

# (case, how to cut the copy, a note the summary must carry)
CASES = [
    ("torn last event", tear_last_line, "events.jsonl: the last line is cut short"),
    ("garbage events mid-file", garble_middle, "events.jsonl: 1 unreadable line(s) skipped"),
    ("rank folder deleted", lambda d: shutil.rmtree(d / "rank-1"), "rank-1/ is missing"),
    ("final.json deleted", lambda d: (d / "final.json").unlink(), "final.json is missing"),
    ("final.json garbage", write("final.json", GARBAGE), "final.json is not JSON"),
    ("final.json empty", write("final.json", b""), "final.json is not JSON"),
    ("final.json not a status", write("final.json", b'{"run": 3}'), "final.json is not a status"),
    ("run.json garbage", write("run.json", GARBAGE), "run.json is not JSON"),
    ("run.json a list", write("run.json", b"[1, 2]"), "run.json is not a JSON object"),
    ("run.json deleted", lambda d: (d / "run.json").unlink(), "run.json is missing"),
    ("events.jsonl deleted", lambda d: (d / "events.jsonl").unlink(), "events.jsonl is missing"),
    ("events.jsonl garbage", write("events.jsonl", GARBAGE), "events.jsonl: the last line is cut short"),
    # a line ends at a newline only, as the writer ends each (a carriage return is no line's end)
    ("gpu.jsonl garbage", write("gpu.jsonl", GARBAGE + b"\n{}\n"), "gpu.jsonl: 4 unreadable line(s) skipped"),
]


@pytest.mark.parametrize("case,cut,note", CASES, ids=[c[0] for c in CASES])
def test_a_cut_short_directory_gives_what_it_can_and_says_what_is_missing(crashed, tmp_path, case, cut, note):
    d = crashed.copy(tmp_path)
    cut(d)
    s = summary(d)
    assert any(n.startswith(note) for n in s["notes"]), s["notes"]
    text = mpwatch("summary", d)
    assert text.returncode == 0 and text.stderr == "" and note in text.stdout
    listed = json.loads(mpwatch("ls", "--all", "--json", tmp_path).stdout)
    assert [r["run_dir"] for r in listed if r["run_dir"] == str(d)] == [str(d)]
    # What is still there is still read: rank 0's log, and the run's id and ranks where a file names them.
    logs = mpwatch("ctl", "--run", d, "logs", "0", "--stderr")
    assert logs.returncode == 0 and "ZeroDivisionError: division by zero" in logs.stdout
    if case not in ("run.json garbage", "run.json a list", "run.json deleted"):
        assert s["listing"]["run_id"] == crashed.run_id
    if case not in ("events.jsonl deleted", "events.jsonl garbage"):
        assert [r["rank"] for r in s["ranks"]] == [0, 1]


def test_the_history_says_how_it_ended_when_run_json_and_final_json_are_gone(crashed, killed, tmp_path):
    d = crashed.copy(tmp_path)
    (d / "run.json").unlink()
    (d / "final.json").unlink()
    s = summary(d)
    assert (s["listing"]["ending"], s["listing"]["exit_code"]) == ("finished", 1)
    assert s["listing"]["first_failure"]["error"] == "ZeroDivisionError: division by zero"
    k = killed.copy(tmp_path, "killed")
    (k / "run.json").unlink()
    assert summary(k)["listing"]["ending"] == "cut short"


def test_a_torn_line_loses_only_itself(crashed, tmp_path):
    whole = reader.read(crashed.dir).events()
    d = crashed.copy(tmp_path)
    tear_last_line(d)
    torn = reader.read(d)
    assert torn.events() == whole[:-1]
    d2 = crashed.copy(tmp_path, "garbled")
    garble_middle(d2)
    assert reader.read(d2).events() == whole


def test_logs_of_a_deleted_rank_folder_say_so(crashed, tmp_path):
    d = crashed.copy(tmp_path)
    shutil.rmtree(d / "rank-1")
    one_line_error(mpwatch("ctl", "--run", d, "logs", "1"), f"run {crashed.run_id} has no folder for rank 1")
    one_line_error(mpwatch("ctl", "--run", d, "logs", "7"), f"no rank 7 in run {crashed.run_id} (ranks 0-1)")


def test_a_directory_with_nothing_of_a_run_is_refused(crashed, tmp_path):
    d = crashed.copy(tmp_path)
    for name in ("run.json", "events.jsonl", "final.json"):
        (d / name).unlink()
    file = tmp_path / "a-file"
    file.write_text("x")
    for args, words in ((["summary", d], f"{d} is not an mpwatch run directory"),
                        (["summary", tmp_path / "empty"], f"no such run: {tmp_path / 'empty'}"),
                        (["summary", file], f"{file} is not a run directory (not a directory)"),
                        (["summary", "/"], "/ is not an mpwatch run directory"),
                        (["ctl", "--run", d, "logs", "0"], f"{d} is not an mpwatch run directory"),
                        (["ls", "--all", tmp_path / "nowhere"], f"no such folder: {tmp_path / 'nowhere'}")):
        one_line_error(mpwatch(*args), words)
    assert "not-a-run" not in mpwatch("ls", "--all", tmp_path).stdout


def test_another_users_run_directory_is_one_line(crashed, nobody):
    """The run directory is 0700: another user (uid 65534) reading it gets one line, exit code 2."""
    d = crashed.copy(nobody.shared("runs"))
    assert d.stat().st_mode & 0o777 == 0o700
    for args in (["summary", d], ["ctl", "--run", d, "logs", "0"]):
        one_line_error(nobody.mpwatch(*args), f"run directory {d} is not readable by this user")
