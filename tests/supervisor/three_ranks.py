"""One real 3-rank gloo run of demo/hang.py (torch) that four tests read, started once a session:
tests/supervisor/test_paused_culprit.py (rank 1 paused: its peers stall, the finding names the
pause; resumed, the finding ends), tests/supervisor/test_rates.py (resumed, the three step at one
rate), tests/tui/test_event_words.py (the live events screen says which alert ended), and
tests/supervisor/test_peer_causes.py (then resized to 4 ranks and rank 2 killed: its peers'
collectives fail, each cause names it). Each ran the same 3-rank start for itself; one start, two
acts, each test asserting on its own part.

`three_ranks` drives the run through both acts and keeps what each test reads: the events and
the live statuses of its act. An act that fails keeps its error for its own test to raise; the
next act still runs. Its tests share the xdist group `three-ranks` (tests/conftest.py)."""
from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import pytest

from mpwatch.probes import pyspy
from mpwatch.sources.local import Client
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.events import EventsScreen
from tests.helpers import ROOT, HeadlessRun, WaitTimeout, internal_errors, need, wait_for
from tests.recorded_runs import finding_in_status

# Where the peers wait depends on where the pause caught rank 1: in the loss's all_reduce, or in
# backward(), whose DDP gradient all-reduce only the native stack (py-spy, when installed) shows.
NEED_IN = r" in " if pyspy.find() else r"(?: in )?"
FINDING = re.compile(rf"^ranks 0,2 wait{NEED_IN}(all_reduce|DDP's gradient all-reduce \(backward\)|) "
                     r"at step (\d+) for rank 1, which was paused at (\d\d:\d\d:\d\d) \(p resumes\)$")


class PausedAct:
    """Rank 1 paused until its finding stands, then resumed until the finding has ended."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.before = 0.0  # time.time() just before `ctl pause 1`
        self.alert: dict = {}  # the first hang alert that is FINDING
        self.status: dict = {}  # the live status once its own analysis says what its last alert says
        self.stderr = ""  # the supervisor's status lines, the finding standing
        self.resumed_status: dict = {}  # the live status once the finding has left it
        self.events: list[dict] = []  # every event of the run until the finding's end
        self.step_at_resume = 0  # the highest step just after `ctl resume 1`
        self.after_resume: list[dict] | BaseException = []  # the workers once each is 40 steps on
        self.events_screen: dict[tuple[int, int], list[str] | BaseException] = {}  # size -> its lines

    def play(self, run: HeadlessRun) -> None:
        wait_for(lambda: all((w["step"] or 0) >= 10 for w in run.status()["workers"]), 180,
                 what="three ranks stepping")
        self.before = time.time()
        run.ctl("pause", "1")
        self.alert = run.wait_event("alert", lambda r: r.get("kind") == "hang"
                                    and bool(FINDING.match(r["message"])), timeout=120)[0]
        self.status = finding_in_status(run)
        self.stderr = run.stderr_text
        run.ctl("resume", "1")
        self.step_at_resume = step = max(w["step"] for w in run.status()["workers"])

        def stepped() -> list[dict] | None:
            # each rank 40 steps on (a second at 0.02 s a step: four of its report batches, so that its
            # rate is read over several), well within a window that would still span the pause
            ws = run.status()["workers"]
            return ws if all((w["step"] or 0) >= step + 40 and w["steps_per_s"] for w in ws) else None
        try:
            self.after_resume = wait_for(stepped, 60, interval=0.02, what="40 steps after the resume")
        except WaitTimeout as exc:  # test_rates' own failure; the act goes on
            self.after_resume = exc
        wait_for(lambda: all(w["state"] == "running" for w in run.status()["workers"]), 120,
                 what="every rank running")
        wait_for(lambda: not run.status()["alerts"], 60, what="the finding to leave the status")
        # events.jsonl is flushed within a second of the status: wait for the finding's end there
        run.wait_event("alert", lambda e: e.get("key") == "hang:1" and e.get("ended"), 30)
        self.resumed_status = run.status()
        self.events = run.events()
        for size in ((80, 24), (160, 48)):
            self.events_screen[size] = events_lines(run, size)


async def until(pilot, pred, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await pilot.pause(0.05)


def events_lines(run: HeadlessRun, size: tuple[int, int]) -> list[str] | BaseException:
    """The events screen of a TUI attached to the live run, line by line (or what failed): in a
    thread of its own, whose event loop is the app's alone (the caller may be a test's)."""
    got: list[list[str] | BaseException] = []

    async def lines() -> list[str]:
        with Client.at(run.run_dir) as client:
            app = MpwatchApp(client, run.run_dir, glyphs=glyphs.UNICODE, notices=False)
            async with app.run_test(size=size) as pilot:
                await until(pilot, lambda: app.snapshots > 0, what="the first snapshot")
                await pilot.press("e")
                await until(pilot, lambda: isinstance(app.screen, EventsScreen), what="the events screen")
                ls = app.screen.list
                out = [str(ls.get_option_at_index(i).prompt) for i in range(ls.option_count)]
                app.poller.stop()
        return out

    def main() -> None:
        try:
            got.append(asyncio.run(lines()))
        except BaseException as exc:  # noqa: BLE001 - the test that reads it raises it
            got.append(exc)
    t = threading.Thread(target=main, name=f"events-screen-{size[0]}x{size[1]}")
    t.start()
    t.join(120)
    return got[0] if got else TimeoutError(f"the events screen at {size} took over 120 s")


class PeersAct:
    """Resized to 4 ranks, then rank 2 killed: every rank's end."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.stderr_of_0 = ""  # rank 0's stderr log once the four ranks step
        self.resized: list[dict] = []  # the worker_exited events of the ranks the resize stopped
        self.ends: dict[int, dict] = {}  # rank -> its worker_exited event after the kill

    def play(self, run: HeadlessRun) -> None:
        run.ctl("resize", "4")
        wait_for(lambda: (lambda st: len(st["workers"]) == 4 and all(
            w["state"] == "running" and w["restarts"] == 0 and (w["step"] or 0) >= 3 and w.get("dist")
            for w in st["workers"]))(run.status()), 180, what="four ranks stepping in one process group")
        self.stderr_of_0 = run.log(0, "stderr")
        # the resize's three, read before the kill: read after it, rank 2's own end could be among
        # them already, and the four ends after the kill would never all come
        self.resized = run.wait_event("worker_exited", timeout=30, count=3)
        before = len(self.resized)
        run.ctl("kill", "2")
        try:
            exits = run.wait_event("worker_exited", timeout=120, count=before + 4)
        except WaitTimeout as exc:  # what the run said after the kill
            raise AssertionError(f"{exc}: the last events: {run.events()[-30:]}") from exc
        self.ends = {e["rank"]: e for e in exits[before:]}
        run.wait_exit(60)


class ThreeRanks:
    """The run and its two acts (see the module's docstring)."""

    def __init__(self, folder: Path) -> None:
        self.run = HeadlessRun(folder, ROOT / "demo" / "hang.py", "--steps", "100000", "--step-time", "0.02",
                               n=3, opts=["--stall-timeout", "6"])
        self.paused = PausedAct()
        self.peers = PeersAct()
        self.bugs: list[str] = []  # the supervisor's internal alerts and logged bugs (tests.helpers)

    def play(self) -> None:
        self.run.start()
        for act in (self.paused, self.peers):
            try:
                act.play(self.run)
            except Exception as exc:  # noqa: BLE001 - kept for the act's own test: the next act still runs
                act.error = exc
        self.bugs = internal_errors(self.run.tmp)


@pytest.fixture(scope="session")
def three_ranks(tmp_path_factory):
    need("torch", "demo/hang.py needs torch (the demo extra)")
    shared = ThreeRanks(tmp_path_factory.mktemp("three-ranks"))
    try:
        shared.play()
        yield shared
    finally:
        shared.run.cleanup()


def act(shared: ThreeRanks, which: PausedAct | PeersAct) -> None:
    """Fail the test of an act that did not play out, with its own error; and fail on a bug
    the supervisor recorded (the autouse check sees only the test's own tmp_path)."""
    if which.error is not None:
        raise which.error
    assert not shared.bugs, shared.bugs
