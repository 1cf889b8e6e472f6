"""Texts fed what the producer really sent (tests/record.py): event lines and notices from
the recorded events and the loss plot from the recorded loss history (the recordings
against the schema: tests/test_recordings.py)."""
from __future__ import annotations

import re

import pytest

from mpwatch.text import eventtext
from mpwatch.tui.render import glyphs, segs
from mpwatch.tui.widgets.loss_plot import plot_lines
from tests.tui.recorded import recording

NAMES = ["gpu2", "gpu8", "states"]
SUMMARY = re.compile(r"^(\d+ \w+(, \d+ \w+)*|no workers)( · |$)")  # the headless 10 s summary lines


@pytest.mark.parametrize("name", NAMES)
def test_event_lines_are_the_lines_the_supervisor_printed(name):
    rec = recording(name)
    want = [t for t in (eventtext.line(e) for e in rec["events"]) if t]
    assert want, "the recording has events worth a line"
    lines = iter(rec["lines"])
    for text in want:  # in order; only the periodic summary lines between them
        for got in lines:
            if got == text:
                break
            assert SUMMARY.match(got), f"a line no event explains: {got!r} (looking for {text!r})"
        else:
            pytest.fail(f"the supervisor never printed {text!r}")


def test_a_failed_worker_is_an_error_notice_with_its_last_stderr_line():
    events = recording("states")["events"]
    failed = [e for e in events if e["event"] == "worker_exited" and e["state"] == "failed"]
    assert failed
    for e in failed:
        text, sev = eventtext.notice(e)
        assert sev == "error" and text.startswith(f"rank {e['rank']} failed: exit 1")
    restarted = next(e for e in events if e["event"] == "restarted")
    assert eventtext.notice(restarted)[1] == "warning"
    assert eventtext.notice(next(e for e in events if e["event"] == "worker_started")) is None
    stalled = next(e for e in events if e["event"] == "stalled")
    assert eventtext.notice(stalled) == (eventtext.line(stalled), "warning")
    gpu = [e for e in recording("gpu2")["events"] if e["event"] == "gpu_alert"]
    assert gpu and all(eventtext.notice(e)[1] == {"error": "error", "warning": "warning", "info": "information"}[
        e["severity"]] for e in gpu)
    # a worker that could not start (a real one: the folder its restart starts in was removed)
    (nostart,) = [e for e in recording("ended")["events"]
                  if e["event"] == "worker_exited" and (e["cause"] or "").startswith("could not start")]
    assert nostart["pid"] is None and nostart["exit_code"] is None
    assert eventtext.notice(nostart) == ("rank 3 failed: could not start: No such file or directory", "error")


def test_log_scale_spreads_a_loss_that_falls_over_orders_of_magnitude():
    history = recording("states")["history"]
    series = {int(r): [tuple(p) for p in pts] for r, pts in history.items() if pts}
    losses = [v for pts in series.values() for _, v in pts]
    assert max(losses) / min(losses) > 100
    height = 12

    def bottom_share(log):
        """The share of the plot's columns whose point lies on the bottom row: flat."""
        lines = plot_lines(series, 0, 80, height, glyphs.ASCII, log=log)
        grid = [segs.plain(line)[9:] for line in lines[:-1]]
        drawn = [c for c in range(len(grid[0])) if any(row[c] != " " for row in grid)]
        return sum(grid[-1][c] != " " for c in drawn) / len(drawn), segs.plain(lines[-1])

    lin, lin_axis = bottom_share(False)
    log, log_axis = bottom_share(True)
    assert "linear scale" in lin_axis and "log scale" in log_axis
    # flat after the first steps on linear; a slope on log (its points at the loss's floor, as many
    # as the recorded run stayed there, are on the bottom row either way)
    assert lin > 0.5 and log < lin / 3, (lin, log)
    top = segs.plain(plot_lines(series, 0, 80, height, glyphs.ASCII, log=True)[0]).split()[0]
    assert float(top) == pytest.approx(max(losses), rel=0.01)  # labels in the loss's own units


def test_ranks_that_end_together_are_one_notice_and_a_cause_is_not_said_twice():
    from mpwatch.text import eventtext
    exits = [e for e in recording("states")["events"] if e["event"] == "worker_exited"]
    text, sev = eventtext.exits_notice(exits[:2])
    # their cause, said (issue 31: "in the table" was false where a rank was started again since)
    cause = "exit 1: RuntimeError: CUDA error: an illegal memory access was encountered"
    assert [e["cause"] for e in exits[:2]] == [cause, cause]
    assert (text, sev) == (f"ranks 3,4 failed: {cause}", "error")
    ended = [e for e in recording("ended")["events"] if e["event"] == "worker_exited"]
    assert len({(e["state"], e["cause"]) for e in ended}) > eventtext.EXIT_GROUPS
    text, sev = eventtext.exits_notice(ended)  # more causes than a notice says: where they are
    assert text.endswith("(each one's cause: e, the events)") and sev == "error", text
    # a failure whose cause holds its own words adds no raw stderr line under it
    note, _ = eventtext.notice(exits[0])
    assert note == "rank 3 failed: exit 1: RuntimeError: CUDA error: an illegal memory access was encountered"
