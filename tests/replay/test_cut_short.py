"""Run directories cut short or garbled (the post-mortem's cases, tests/cli/test_cut_short.py,
on copies of a real run): the replay opens on each, in the TUI, with a note saying what is
missing, and shows what can be shown, at every moment; never a traceback. A path that is no
run directory: one line and exit code 2."""
from __future__ import annotations

import pytest

from mpwatch.sources.replay import ReplaySource
from mpwatch.tui.render import glyphs
from mpwatch.tui.replay_app import ReplayApp
from tests.cli.test_cut_short import CASES
from tests.helpers import mpwatch, one_line_error
from tests.tui.conftest import until

pytestmark = pytest.mark.timeout(300)

# Where the replay's own reading words a note differently from the post-mortem's.
REPLAY_NOTE = {
    "garbage events mid-file": "events.jsonl: 3 line(s) that are no event skipped",
    "gpu.jsonl garbage": "gpu.jsonl: 5 unreadable line(s) skipped",  # a line ends at a newline only
}


@pytest.mark.parametrize("case,cut,note", CASES, ids=[c[0] for c in CASES])
async def test_a_cut_short_directory_opens_with_a_note(crashed, tmp_path, case, cut, note):
    d = crashed.copy(tmp_path)
    cut(d)
    want = REPLAY_NOTE.get(case, note)
    src = ReplaySource(d)
    src.read_all()
    assert any(want in n for n in src.notes), src.notes
    app = ReplayApp(ReplaySource(d), glyphs=glyphs.UNICODE, notices=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.snapshots > 0, what="the first status")
        await until(pilot, lambda: "shown" in app.banner.classes and want in str(app.banner.render()),
                    what=f"the note {want!r} in the banner")
        ranks = {w["rank"] for w in app.status["workers"]}
        if case != "events.jsonl deleted" and case != "events.jsonl garbage":
            assert ranks == {0, 1}, app.status["workers"]
        for k in ("home", "full_stop", "right_square_bracket", "left_square_bracket", "end", "l", "escape", "enter"):
            await pilot.press(k)  # every moment and view of what is left; any exception fails the test
        await pilot.pause(0.3)
    assert app.return_value is None  # it did not end on an error


def test_what_is_no_run_directory_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    one_line_error(mpwatch("show", tmp_path / "empty"), "is not an mpwatch run directory")
    one_line_error(mpwatch("show", tmp_path / "file"), "is not a run directory (not a directory)")
    one_line_error(mpwatch("show", tmp_path / "nowhere"), "no such run")
    one_line_error(mpwatch("show", "20990101-000000-nothing", cwd=tmp_path), "no such run")
    one_line_error(mpwatch("show", "--bogus"), "unrecognized arguments")
