"""Issue 5 in the TUI: a stalled row says what the worker is doing and where it is stuck,
and the dump view marks each thread's innermost frame of the user's own code."""
from mpwatch import stackfmt
from mpwatch.tui import view
from mpwatch.tui.screens.detail import _dump_text

DUMP = """=== mpwatch stack dump: pid 41 at 03:12:09 (stall)
Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f00 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in acquire
  File "/home/ana/train.py", line 28 in wait_for_batch
  File "/home/ana/train.py", line 51 in <module>
"""


def test_only_the_innermost_user_frame_of_each_thread_is_marked():
    lines = DUMP.splitlines()
    marked = stackfmt.user_frame_lines(DUMP)
    assert [lines[i] for i in marked] == ['  File "/home/ana/train.py", line 28 in wait_for_batch']
    plain = _dump_text(DUMP).plain.splitlines()
    assert '> File "/home/ana/train.py", line 28 in wait_for_batch' in plain  # readable without colour
    assert sum(line.startswith(">") for line in plain) == 1


def test_empty_dump_says_how_to_take_one():
    assert "press d" in _dump_text("").plain


def test_stalled_row_note_names_the_kind_and_the_user_frame():
    w = {"state": "stalled", "step": 118, "heartbeat_age": 75.0,
         "stall": {"step": 118, "kind": "blocked", "detail": "futex_do_wait",
                   "where": "wait_for_batch (train.py:28)", "collective": "all_reduce"}}
    note = view.note_text(w)
    assert "stalled at step 118" in note and "blocked (futex_do_wait)" in note
    assert "stuck in wait_for_batch (train.py:28), waiting in all_reduce" in note
