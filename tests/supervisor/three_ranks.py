"""One real 3-rank gloo run of demo/hang.py (torch) that four tests read, started once a session:
tests/supervisor/test_paused_culprit.py (rank 1 paused: its peers stall, the finding names the
pause; resumed, the finding ends), tests/supervisor/test_rates.py (paused, its blocked peers read
no rate within seconds, in the status and the metrics; resumed, the three step at one rate), tests/tui/test_event_words.py (the live events screen says which alert ended), and
tests/supervisor/test_peer_causes.py (then resized to 4 ranks and rank 2 killed: its peers'
collectives fail, each cause names it). Each ran the same 3-rank start for itself; one start, two
acts, each test asserting on its own part.

`three_ranks` drives the run through both acts and keeps what each test reads: the events and
the live statuses of its act. An act that fails keeps its error for its own test to raise; the
next act still runs. Its tests share the xdist group `three-ranks` (tests/conftest.py)."""
from __future__ import annotations

import asyncio
import functools
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from mpwatch.probes import pyspy
from mpwatch.sources.local import Client
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from mpwatch.tui.screens.events import EventsScreen
from tests.helpers import ROOT, HeadlessRun, WaitTimeout, internal_errors, need, wait_for
from tests.recorded_runs import finding_in_status
from tests.supervisor import test_metrics as metrics

AFTER_RESUME = 200  # steps each rank makes after `ctl resume 1` before its rate is read


@functools.cache
def native_stacks() -> bool:
    """Whether the supervisor's stall dumps get native stacks here: py-spy installed, and allowed to
    attach to a process beside it (a hosted runner's user under kernel.yama.ptrace_scope=1 is not).
    Asked as the supervisor asks it: py-spy and its target are children of one process."""
    if pyspy.find() is None:
        return False
    argv = [sys.executable, "-c", "import time; time.sleep(120)"]
    p = subprocess.Popen(argv, start_new_session=True)
    try:
        wait_for(lambda: psutil.Process(p.pid).cmdline() == argv, 30, what="the process py-spy is tried on")
        return pyspy.dump(p.pid, native=True)[0]
    finally:
        p.kill()
        p.wait()


@functools.cache
def finding() -> re.Pattern[str]:
    """The finding of the paused act. Where the peers wait depends on where the pause caught rank 1:
    in the loss's all_reduce, or in backward(), whose DDP gradient all-reduce only a native stack
    shows: without one (docs/hangs.md) that finding names no collective. Groups: where, step, when."""
    where = r"( in all_reduce| in DDP's gradient all-reduce \(backward\))" if native_stacks() else r"( in all_reduce|)"
    return re.compile(rf"^ranks 0,2 wait{where} at step (\d+) for rank 1, which was paused at (\d\d:\d\d:\d\d) "
                      r"\(p resumes\)$")


class PausedAct:
    """Rank 1 paused until its finding stands, then resumed until the finding has ended."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.before = 0.0  # time.time() just before `ctl pause 1`
        self.quiet: dict[str, object] = {}  # the peers' rates once both read none: after how long, where
        self.alert: dict = {}  # the first hang alert that is finding()
        self.status: dict = {}  # the live status once its own analysis says what its last alert says
        self.stderr = ""  # the supervisor's status lines, the finding standing
        self.resumed_status: dict = {}  # the live status once the finding has left it
        self.events: list[dict] = []  # every event of the run until the finding's end
        self.step_at_resume = 0  # the highest step just after `ctl resume 1`
        self.after_resume: list[dict] | BaseException = []  # the workers once each is 100 steps on
        self.events_screen: dict[tuple[int, int], list[str] | BaseException] = {}  # size -> its lines

    def play(self, run: HeadlessRun) -> None:
        wait_for(lambda: all((w["step"] or 0) >= 10 for w in run.status()["workers"]), 180,
                 what="three ranks stepping")
        self.before = time.time()
        run.ctl("pause", "1")
        self.quiet = peers_quiet(run, self.before)
        self.alert = run.wait_event("alert", lambda r: r.get("kind") == "hang"
                                    and bool(finding().match(r["message"])), timeout=120)[0]
        self.status = finding_in_status(run)
        self.stderr = run.stderr_text
        run.ctl("resume", "1")
        self.step_at_resume = step = max(w["step"] for w in run.status()["workers"])

        def stepped() -> list[dict] | None:
            # each rank 200 steps on (4 to 6 s at 0.02 s a step: 16 or more of its report batches, so
            # that its rate is read over several and one batch late by a flush moves it little; over four
            # a late one read 9.3 beside 21.8 under a loaded suite, and 100 steps, once the ranks ran
            # one OpenMP thread each and stepped 36/s, not 10, read 21 beside 36), well within a window
            # (32 batches, 8 s) that would still span the pause
            ws = run.status()["workers"]
            return ws if all((w["step"] or 0) >= step + AFTER_RESUME and w["steps_per_s"] for w in ws) else None
        try:
            self.after_resume = wait_for(stepped, 60, interval=0.02, what=f"{AFTER_RESUME} steps after the resume")
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


def peers_quiet(run: HeadlessRun, before: float) -> dict[str, object]:
    """Rank 1 just paused: how long until ranks 0 and 2, blocked in their collectives behind it,
    read no rate (None or 0) both in the status and in the metrics' steps per second; the
    rates read until then (an AssertionError's text where they never did, within 30 s)."""
    port = run.status()["run"]["options"]["metrics"]
    seen: list[tuple[float, list[float | None], dict[str, float]]] = []

    def quiet() -> bool:
        rates = [w["steps_per_s"] for w in run.status()["workers"]]
        page = metrics.get(f"http://{port}/metrics")[1]
        scraped = {s.labels["rank"]: s.value for s in metrics.samples(page)["mpwatch_worker_steps_per_second"]}
        seen.append((round(time.time() - before, 2), rates, scraped))
        return all(not rates[r] and not scraped.get(str(r)) for r in (0, 2))
    try:
        wait_for(quiet, 30, interval=0.2, what="the peers of the paused rank to read no rate")
    except WaitTimeout as exc:
        return {"error": f"{exc}: {seen[-5:]}"}
    return {"after_s": seen[-1][0], "seen": seen}


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
                               n=3, opts=["--stall-timeout", "6", "--metrics-port", str(metrics.free_port())])
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
