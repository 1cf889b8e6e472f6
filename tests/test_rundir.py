"""The run directory's one layout, one writer and one reader (rundir.layout, rundir.writer,
rundir.reader with rundir.textfiles): every file name spelled in the layout alone; the byte
patterns of rundir.eventlines match the lines the real writer writes; a torn last line is
skipped and counted apart; a curve is the rank's own reports, a NaN loss read as NaN."""
from __future__ import annotations

import ast
import json
import math
import shutil
from pathlib import Path

import mpwatch
from mpwatch.rundir import eventlines, layout, reader, textfiles
from mpwatch.rundir.eventlines import report_fields
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings

PACKAGE = Path(mpwatch.__file__).parent
NAMES = {layout.RUN_JSON, layout.EVENTS, layout.CONTROL_JSON, layout.FINAL_JSON, layout.GPU_JSONL,
         layout.SUPERVISOR_LOG, layout.STDOUT_LOG, layout.STDERR_LOG, layout.STACK_FILE, layout.RUNS_FOLDER}
T0 = 1_700_000_000.0


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_every_file_name_is_spelled_in_the_layout_alone():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "rundir" / "layout.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
                continue
            v = node.value
            if any(v == n or v.endswith("/" + n) for n in NAMES) or layout.RUNS_FOLDER in v:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {v!r}")
    assert not found, "file names spelled outside rundir.layout:\n" + "\n".join(found)


def written_run(d: Path) -> RunStore:
    """A run's report events through the real writer: rank 0's own, a NaN loss (written
    compact), a child process's, and rank 1's own."""
    store = RunStore(d, Settings())
    store.create()
    store.event("run_started", ts=T0, script="train.py", args=[], nprocs=2, run_dir=str(d), pid=1)
    for i in range(3):
        store.report(0, T0 + i, report_fields(i, 1.0 / (i + 1), {"lr": 0.1}, 1, 0))
        store.report(1, T0 + i, report_fields(i, 2.0, {}, 1, 0))
    store.report(0, T0 + 3, report_fields(3, math.nan, {}, 1, 0))
    store.report(0, T0 + 4, report_fields(7, 9.0, {}, 1, 0, child=(900, 100)))  # a DataLoader worker's
    store.event("stalled", 1, ts=T0 + 5, silent_for=6.0, step=2, pid=101, kind="blocked", detail=None)
    store.close()
    return store


def test_the_byte_patterns_match_the_lines_the_writer_writes(tmp_path):
    written_run(tmp_path)
    data = (tmp_path / layout.EVENTS).read_bytes()
    lines = data.splitlines(keepends=True)
    assert all(eventlines.HEAD.match(line) for line in lines)
    own = [(int(r), float(loss.strip(b'"'))) for _, r, _, loss in eventlines.OWN_REPORT.findall(data)]
    assert [r for r, _ in own] == [0, 1, 0, 1, 0, 1, 0]  # the child's report is not rank 0's
    assert math.isnan(own[-1][1])  # the compact line of the NaN loss is found too
    assert [int(m.group(1)) for line in lines if (m := eventlines.CHILD.search(line))] == [900]
    assert [m.group(0) for m in eventlines.NOT_REPORT.finditer(data)] == [b'"event": "', b'"event": "']
    assert any(eventlines.report_needles(0)[1] in line for line in lines)  # the compact spelling
    parsed = [json.loads(line) for line in lines]
    assert [eventlines.own_report(r) for r in parsed if r["event"] == "report"] == [True] * 7 + [False]


def test_a_curve_is_the_ranks_own_reports_and_a_nan_loss_reads_as_nan(tmp_path):
    written_run(tmp_path)
    with open(tmp_path / layout.EVENTS, "a") as f:
        f.write('{"ts": %s, "event": "report", "rank": 1, "step": 3, "lo' % (T0 + 6))  # cut mid-write
    curves = reader.history(tmp_path)
    assert sorted(curves) == [0, 1]
    assert curves[1] == [(0.0, 2.0), (1.0, 2.0), (2.0, 2.0)]
    steps = [s for s, _ in curves[0]]
    assert steps == [0.0, 1.0, 2.0, 3.0]  # step 7 was the child's
    assert all(isinstance(v, float) for _, v in curves[0]) and math.isnan(curves[0][-1][1])
    assert reader.history(tmp_path, ranks={1}).keys() == {1}


def test_a_torn_last_line_is_skipped_and_counted_apart_from_garbled_ones(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"event": "a"}\nnot json\n{"event": "b"}\n[1, 2]\n{"event": "c", "cut')
    skipped = textfiles.Skipped()
    assert [r["event"] for r in textfiles.read_jsonl(path, skipped=skipped)] == ["a", "b"]
    assert skipped.bad == 1 and skipped.torn
    whole = textfiles.Skipped()
    assert [r["event"] for r in textfiles.read_jsonl(path, kinds={"b"}, skipped=whole)] == ["b"]
    assert list(textfiles.read_jsonl(tmp_path / "none.jsonl")) == []


def test_the_writer_makes_each_file_of_a_rank(tmp_path):
    store = RunStore(tmp_path / "run", Settings())
    store.create()
    paths = store.rank_paths(3)
    assert paths == layout.rank_paths(tmp_path / "run", 3)
    assert paths.stacks.is_dir() and paths.stack_file.is_file()  # before the worker's faulthandler opens it
    first, second = store.new_dump(3), store.new_dump(3)
    assert first != second and first.parent == second.parent == paths.stacks
    assert first.suffix == layout.STACK_SUFFIX and first.read_text() == ""
    with store.open_log(3, "stdout") as f:
        f.write(b"hello\n")
    store.mark_logs(3, "rank 3 restarted at 12:00:00")
    assert paths.stdout.read_text() == f"hello\n\n{layout.LOG_MARK}rank 3 restarted at 12:00:00 ---\n"
    assert paths.stderr.read_text() == f"\n{layout.LOG_MARK}rank 3 restarted at 12:00:00 ---\n"
    store.close()
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700


# ------------------------------------------------------------ bounded reads ----
STORED_HANG = Path(__file__).resolve().parent / "replay" / "data" / "hang"  # a real run's files


class _Counted:
    """A run file opened by textfiles.open_regular, counting the bytes read from it."""

    def __init__(self, f, counts: list[int]):
        self.f, self.counts = f, counts

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.counts.append(len(data))
        return data

    def __getattr__(self, name):  # readline, seek...: the file's own
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_json_file_over_the_size_limit_is_not_read(tmp_path, monkeypatch):
    """textfiles' promise: a JSON file past MAX_JSON is not read (its first MAX_JSON + 1 bytes tell
    it is too long), and the run's facts come from its other files. The limit is made small here
    (256 MiB of file would be the real case's)."""
    limit = 64 << 10
    monkeypatch.setattr(textfiles, "MAX_JSON", limit)
    opened = textfiles.open_regular
    counts: list[int] = []
    monkeypatch.setattr(textfiles, "open_regular", lambda path: _Counted(opened(path), counts))
    at_limit, over = tmp_path / "at.json", tmp_path / "over.json"
    at_limit.write_bytes(b'{"a": 1}' + b" " * (limit - 8))  # valid JSON, exactly the limit: read
    over.write_bytes(b'{"a": 1}' + b" " * (8 * limit))  # valid JSON, far past it
    assert textfiles.read_json_file(at_limit) == ({"a": 1}, None)
    counts.clear()
    data, why = textfiles.read_json_file(over)
    assert data is None and why is not None and why.startswith("unreadable (larger than"), why
    assert sum(counts) == limit + 1  # no byte past the one that tells
    assert textfiles.read_json(over.parent, over.name) is None

    # the reader of a run directory: run.json and final.json past the limit are notes, not facts
    run = tmp_path / "run"
    shutil.copytree(STORED_HANG, run)
    assert reader.read(run).final is not None and not reader.read(run).notes
    for name in (layout.RUN_JSON, layout.FINAL_JSON):
        with open(run / name, "ab") as f:
            f.write(b" " * limit)  # still valid JSON, now past the limit
    rd = reader.read(run)
    assert rd.final is None
    assert any(n.startswith(f"{layout.FINAL_JSON} is unreadable (larger than") for n in rd.notes), rd.notes
    assert any(n.startswith(f"{layout.RUN_JSON} is unreadable (larger than") for n in rd.notes), rd.notes
    assert rd.run.script == "/home/user/mpwatch/demo/hang.py" and rd.run.nprocs == 3  # from its first event


def test_the_end_of_a_run_cut_short_is_the_latest_thing_it_said(tmp_path):
    """Two ranks' report events written as their batches came: a line may be timed after the line
    written next. A run cut short (no final.json) ends at the latest time of its file's end, never
    at its last line's, which would leave the other rank's last report after the end."""
    store = RunStore(tmp_path / "run", Settings())
    store.create()
    store.event("report", 1, ts=1000.9, step=3, loss=0.5, metrics={}, n=1, dropped=0)  # rank 1's batch first
    store.event("report", 0, ts=1000.4, step=3, loss=0.5, metrics={}, n=1, dropped=0)
    store.flush()
    rd = reader.read(tmp_path / "run")
    assert rd.last_event()["ts"] == 1000.4 and rd.last_ts() == 1000.9
