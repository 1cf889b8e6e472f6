"""The timeline strip and the cursor's line, as pure functions of a recorded run's moments
(tests/replay/data/hang, written by a real supervisor)."""
from __future__ import annotations

from mpwatch.sources.replay import ReplaySource
from mpwatch.sources.replay.cursor import STALL
from mpwatch.tui.render import glyphs
from mpwatch.tui.render.segs import plain
from mpwatch.tui.widgets.replay_strip import KEYS, strip_line, where_line
from tests.replay.conftest import STORED_HANG


def test_the_strip_marks_the_stalls_and_the_cursor():
    src = ReplaySource(STORED_HANG)
    moments = src.moments()
    start, end = src.start_time(), src.end_time()
    line = strip_line(moments, start, end, end, 60, glyphs.UNICODE)
    text = plain(line)
    assert len(text) == 60 and "◆" in text and "─" in text
    assert text.count("◆") <= len([k for _, k in moments if k == STALL])
    assert [i for i, (_, style) in enumerate(line) if "reverse" in style] == [59]  # one cursor, at the end
    first_stall = next(ts for ts, k in moments if k == STALL)
    at = strip_line(moments, start, end, first_stall, 60, glyphs.UNICODE)
    here = next(i for i, (_, style) in enumerate(at) if "reverse" in style)
    assert at[here][0] == "◆"  # the cursor stands on the stall's own mark
    # Wide enough that the hang's alert has a cell of its own (at 60 it shares the stall's):
    # stalls and alerts differ in ASCII.
    ascii_text = plain(strip_line(moments, start, end, end, 600, glyphs.ASCII))
    assert ascii_text.isascii() and "!" in ascii_text and "^" in ascii_text


def test_the_cursor_line_says_when_and_what():
    src = ReplaySource(STORED_HANG)
    src.move("jump", -1)
    pos, n, ev = src.where()
    line = plain(where_line(pos, n, ev, src.time_at(), src.start_time(), 160))
    at = f"+{src.time_at() - src.start_time():.1f}s"
    assert line.startswith(f"{at} event {pos + 1}/{n}: alert (updated): ranks 0,2 wait in all_reduce at step 5 "
                           "for rank 1"), line
    assert line.endswith(KEYS)
    assert len(line) == 160
    src.move("end")
    assert plain(where_line(*src.where(), src.time_at(), src.start_time(), 80)).startswith("+")
    assert f"the end ({n} events)" in plain(where_line(*src.where(), src.time_at(), src.start_time(), 80))
