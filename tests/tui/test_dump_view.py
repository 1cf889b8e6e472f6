"""The stack view of the detail screen, fed the stack dump a real stalled worker left
(recorded by tests/record.py, scenario "states"): the main thread first, mpwatch's own
sender thread folded, one line a frame (function first, short paths), the user's innermost
frame marked, readable without colour."""
from mpwatch.text import stackfmt
from mpwatch.tui.render.detail_text import dump_lines
from mpwatch.tui.widgets.cells import lines_to_text
from tests.tui.recorded import recording


def stalled_dump() -> tuple[str, dict]:
    rec = recording("states")
    w = next(w for w in rec["status"]["workers"] if w["state"] == "stalled")
    return rec["dumps"][w["last_dump"]], w


def test_the_main_thread_comes_first_and_mpwatch_threads_are_folded():
    dump, w = stalled_dump()
    raw = dump.splitlines()
    assert raw[1].startswith("Thread ") and "mpwatch/worker" in raw[4]  # faulthandler: the sender first
    (proc,) = stackfmt.stack_view(dump)
    assert proc.heading.startswith(f"mpwatch stack dump: pid {w['pid']}")
    main, *rest = proc.threads
    assert main.main and main.title == "main thread"
    assert [t.mpwatch for t in rest] == [True] and "report sender" in rest[0].title
    funcs = [f.func for f in main.frames]
    assert funcs == ["wait", "wait", "wait_for_batch", "<module>"]  # innermost first, as Python prints
    marked = [f for f in main.frames if f.marked]
    assert [f.func for f in marked] == ["wait_for_batch"]
    assert f"{marked[0].func} ({marked[0].where})" == w["stall"]["where"]  # the row note's frame
    assert main.frames[0].where.startswith("threading.py:") and not main.frames[0].user  # stdlib prefix dropped
    assert proc.native and proc.native[0].startswith("--- py-spy")


def test_one_line_a_frame_and_readable_without_colour():
    dump, _ = stalled_dump()
    text = lines_to_text(dump_lines(dump))
    lines = text.plain.splitlines()
    assert lines[1] == "main thread"
    assert lines[2].startswith("  wait  threading.py:")
    assert lines[4].startswith("> wait_for_batch  record_worker.py:")
    assert sum(line.startswith(">") for line in lines) == 1
    folded = [line for line in lines if "report sender" in line]
    assert len(folded) == 1 and folded[0].endswith("frames folded")
    assert not any("mpwatch/worker" in line for line in lines[:lines.index(folded[0])])
    # the user's frames bright, the library's dim
    styles = {span.style for span in text.spans if text.plain[span.start:span.end] == "wait_for_batch"}
    assert "bold" in styles
    dim = {span.style for span in text.spans if text.plain[span.start:span.end] == "wait"}
    assert dim == {"dim"}


def test_short_paths():
    assert stackfmt.short_path("/usr/lib/python3.11/multiprocessing/popen_fork.py") == "multiprocessing/popen_fork.py"
    assert stackfmt.short_path("/x/.venv/lib/python3.11/site-packages/torch/distributed/c10d.py") == \
        "torch/distributed/c10d.py"
    assert stackfmt.short_path("/srv/mpwatch/mpwatch/worker.py") == "mpwatch/worker.py"
    assert stackfmt.short_path("/home/ana/train.py") == "/home/ana/train.py"
    assert not stackfmt.is_user_file("/srv/elsewhere/mpwatch/worker/sender.py")  # this package, another checkout
    # an older mpwatch's sender (recorded dumps, an older checkout elsewhere): still mpwatch's own
    assert not stackfmt.is_user_file("/srv/elsewhere/mpwatch/worker.py")
    assert not stackfmt.is_user_file("/srv/elsewhere/mpwatch/live/state.py")
    assert stackfmt.is_user_file("/home/ana/mpwatch/train.py")  # a user's folder named mpwatch


def test_empty_dump_says_how_to_take_one():
    assert "press d" in lines_to_text(dump_lines("")).plain
