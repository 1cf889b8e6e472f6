"""The harness every test gets for free:

- Its own runtime directory (XDG_RUNTIME_DIR) per pytest process: `make test` runs six lanes
  (pytest-xdist, `-n 6 --dist loadgroup`), and a lane never sees the other's runs in
  `mpwatch ls`, nor the user's own. Ports come from the OS, tmux sockets and sshd folders are
  made unique by the tests themselves.
- The supervisors it starts are strict (MPWATCH_STRICT_STATES=1), and it fails when a run under
  its tmp_path recorded an `internal` alert or logged a bug's traceback to its supervisor.log,
  unless it is marked `injects_bugs`.
- `nobody`: mpwatch's CLI run as uid 65534 through setpriv (tests/users.py), for the permission
  cases where the suite runs as root; skipped, with the reason, where it cannot be.
- Tests that need root are marked `root` (a test that asks for `nobody` is, by that): as a user
  they skip, saying whether `make test` runs them next as root through a passwordless sudo
  (tests/privilege.py, tests/ci.py). The run ends with every skip, by reason, and writes them to
  $MPWATCH_TEST_OUTCOMES where it is set.
- A test that reads a run shared by several tests (a session fixture named in SHARED_RUNS: the
  runs recorded once per session, tests/recorded_runs.py, and the others) runs in the lane that
  made it (the run's xdist group, e.g. `recorded`).
- At the end, the time spent per folder (setup, call and teardown of its tests, summed), and the
  CPU time its tests cost: the lane's own and that of every process it started and reaped (a
  supervisor counts its workers). The suite is bound by the CPU on a 2-core machine, not by waits.
"""
from __future__ import annotations

import collections
import gc
import json
import os
import resource
import shutil
import tempfile
import time

import pytest

from tests import privilege
from tests.framework_runs import hf_run, lightning_run  # noqa: F401 - one run each, two tests read it
from tests.helpers import HeadlessRun, internal_errors
from tests.libnvml import libnvml, libnvml_no_v3  # noqa: F401 - session fixtures, built once
from tests.recorded_runs import crashed, hung, killed, oom, record, stored_hang  # noqa: F401 - recorded once
from tests.supervisor.three_ranks import three_ranks  # noqa: F401 - the 3-rank run four tests share
from tests.users import Nobody, why_not

# Runs shared by several tests (session fixtures) -> the xdist group their tests share: a
# session fixture read in two lanes is made twice. One group a run, so the lanes split them.
SHARED_RUNS = {**dict.fromkeys(("record", "crashed", "hung", "killed", "oom"), "recorded"),
               "three_ranks": "three-ranks", "lightning_run": "lightning", "hf_run": "hugging-face",
               **dict.fromkeys(("opted_out", "torch_forks"), "auto-loops")}
_RUNTIME: list[str] = []
# Tests that take CPUs from the others (busy processes, processes pinned to a CPU above or below the
# rest) run one after another in one lane: two at once took each other's CPUs (the slowdown test's
# busy processes on the last CPU, the short-of-CPU straggler test's ranks pinned there).
TAKES_CPUS = "takes-cpus"
# Modules whose single tests run longest (SUITE_TIMES=FILE make test: 20 to 45 s each), collected
# first, longest first. xdist hands out the groups first (by their number of tests), then single
# tests in collection order: long ones handed out last ended their lane a minute after the others
# (three lanes of 600 s and one of 659 s, 2026-12-06).
LONG_FIRST = ("tests/supervisor/test_straggler_run.py", "tests/test_recordings.py", "tests/nodes/test_straggler_nodes.py",
              "tests/nodes/test_node_faults.py", "tests/auto/test_mnist_hogwild.py", "tests/e2e/test_findings_tmux.py",
              "tests/remote/test_merged_control.py", "tests/supervisor/test_profile.py")


def pytest_configure(config):
    """Before any test starts a process: this pytest process's own runtime directory."""
    config.addinivalue_line("markers", f"takes_cpus: pins processes to CPUs or runs busy ones there (one lane: the "
                                       f"xdist group {TAKES_CPUS!r})")
    lane = os.environ.get("PYTEST_XDIST_WORKER", "main")
    rt = tempfile.mkdtemp(prefix=f"mpw-rt-{lane}-")  # short: the runs' sockets live under it
    os.chmod(rt, 0o700)
    os.environ["XDG_RUNTIME_DIR"] = rt
    # Every torch process the tests start (a one-rank run, a node's one rank, a script run bare) has
    # as many OpenMP threads as CPUs, and GNU OpenMP's spin for a while after each parallel region:
    # a loop of small ops with sleeps between them took 10 ms of CPU a step, not 0.6, from the lanes
    # beside it. Passive: they sleep at once. What a test asserts never rests on a thread's spinning;
    # runs of several ranks a node have one thread each anyway (OMP_NUM_THREADS=1, as torchrun).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _RUNTIME.append(rt)
    config._mpwatch_started = time.monotonic()  # the suite's wall time, for the summary


def pytest_unconfigure(config):
    for rt in _RUNTIME:
        shutil.rmtree(rt, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups (and names them in the ids)
def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: a module stays whole
    for item in items:
        if "nobody" in getattr(item, "fixturenames", ()) and item.get_closest_marker("root") is None:
            item.add_marker(pytest.mark.root("becoming uid 65534"))
        groups = {SHARED_RUNS[name] for name in getattr(item, "fixturenames", ()) if name in SHARED_RUNS}
        if item.get_closest_marker("takes_cpus") is not None:
            groups.add(TAKES_CPUS)
        assert len(groups) <= 1, f"{item.nodeid} reads runs of two xdist groups: {groups}"
        for group in groups:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def strict_supervisor(monkeypatch, tmp_path, request):
    """Every supervisor a test starts is strict; its internal alerts and logged bugs fail the test."""
    monkeypatch.setenv("MPWATCH_STRICT_STATES", "1")
    yield
    found = internal_errors(tmp_path, bugs=request.node.get_closest_marker("injects_bugs") is None)
    assert not found, f"the supervisor recorded internal errors or logged bugs (its supervisor.log): {found}"


@pytest.fixture
def nobody():
    """Uid 65534, to run mpwatch's CLI as another user (tests/users.py)."""
    why = why_not()
    if why is not None:
        pytest.skip(why)
    user = Nobody()
    yield user
    user.close()


def _headless(folder):
    runs: list[HeadlessRun] = []

    def make(script, *args, n=2, opts=(), env=None, start=True):
        run = HeadlessRun(folder / f"r{len(runs)}", script, *args, n=n, opts=opts, env=env)
        run.tmp.mkdir(parents=True, exist_ok=True)
        runs.append(run)
        return run.start() if start else run
    return make, runs


@pytest.fixture
def headless(tmp_path):
    """Factory: headless(script, *args, n=2, opts=[...]) -> a started HeadlessRun, cleaned up after."""
    make, runs = _headless(tmp_path)
    yield make
    for run in runs:
        run.cleanup()


@pytest.fixture(scope="module")
def headless_module(tmp_path_factory):
    """headless for the runs a module's tests only read (started once, cleaned up after its
    last test). Pytest ends it before another module's test runs in the same lane, so its runs
    are never live beside another module's; mark the module with an xdist_group of its own to
    keep its tests in one lane, else each lane starts them."""
    folder = tmp_path_factory.mktemp("module-runs")
    make, runs = _headless(folder)
    yield make
    for run in runs:
        run.cleanup()
    found = internal_errors(folder)  # the autouse check sees only a test's own tmp_path
    assert not found, f"a module's run recorded internal errors or logged bugs: {found}"


# ------------------------------------------------------------ time per folder ----
_SPENT: collections.Counter[str] = collections.Counter()
_TESTS: collections.Counter[str] = collections.Counter()
_LANES: collections.Counter[str] = collections.Counter()  # xdist worker -> its tests' time: how even the lanes are
_CPU: collections.Counter[str] = collections.Counter()  # folder -> CPU seconds of its tests and processes
_CPU_KEY = "cpu_s"
_TEST_CPU: collections.Counter[str] = collections.Counter()  # test -> its CPU seconds, for the costliest few
_OUTCOMES: dict[str, list[str | None]] = {}  # test -> [passed | failed | skipped, the skip's reason]
_TEST_WALL: collections.Counter[str] = collections.Counter()  # test -> its setup + call + teardown seconds
TIMES_ENV = "SUITE_TIMES"  # a file: each test's wall and CPU seconds, as JSON (to find what costs)


def _cpu_now() -> float:
    """CPU seconds of this pytest process and of every child it reaped (and theirs, when reaped).
    A process that is not reaped, such as a tmux or sshd server that daemonised, is not counted."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report carries the CPU it cost (in the lane that ran it; xdist sends it on)."""
    start = getattr(item, "_mpwatch_cpu", None)
    outcome = yield
    now = _cpu_now()
    if start is not None:
        outcome.get_result().user_properties.append((_CPU_KEY, now - start))
    item._mpwatch_cpu = now


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item._mpwatch_cpu = _cpu_now()
    root = item.get_closest_marker("root")
    if root is not None and not privilege.is_root():
        pytest.skip(privilege.root_reason(root.args[0] if root.args else "root"))


def _folder(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) + "/" if len(parts) > 2 else "tests/*.py"


def pytest_runtest_logreport(report):
    """Runs where the reports arrive: in the one process, or in xdist's controller."""
    folder = _folder(report.nodeid)
    _SPENT[folder] += report.duration
    node = getattr(report, "node", None)
    _LANES[getattr(getattr(node, "gateway", None), "id", "main")] += report.duration
    if report.when == "call":
        _TESTS[folder] += 1
    cpu = sum(value for key, value in report.user_properties if key == _CPU_KEY)
    _CPU[folder] += cpu
    _TEST_CPU[report.nodeid] += cpu
    _TEST_WALL[report.nodeid] += report.duration
    if report.failed or report.nodeid not in _OUTCOMES:  # a test's first word, unless a later phase fails
        _OUTCOMES[report.nodeid] = ["failed" if report.failed else "skipped" if report.skipped else "passed",
                                    privilege.skip_reason(report) if report.skipped else None]
    elif report.when == "call" and _OUTCOMES[report.nodeid][0] == "passed" and report.skipped:
        _OUTCOMES[report.nodeid] = ["skipped", privilege.skip_reason(report)]  # skipped in its body


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _SPENT or hasattr(config, "workerinput"):  # an xdist worker: the controller says it
        return
    tr = terminalreporter
    _say_times(tr, config)
    _say_skips(tr)


def _say_times(tr, config) -> None:
    lanes = getattr(config.option, "numprocesses", None) or 1
    wall = time.monotonic() - getattr(config, "_mpwatch_started", time.monotonic())
    tr.section(f"time per folder (setup + call + teardown, summed over {lanes} lane(s)), and its CPU time")
    for folder, spent in sorted(_SPENT.items(), key=lambda kv: -kv[1]):
        tr.write_line(f"{folder:<18} {spent:7.1f}s  {_TESTS[folder]:4d} tests  CPU {_CPU[folder]:7.1f}s")
    total = sum(_SPENT.values())
    both = f" (the tests' time is {total / wall:.2f}x it: the lanes overlap)" if lanes > 1 and wall > 0 else ""
    tr.write_line(f"{'all':<18} {total:7.1f}s; the run took {wall:.1f}s of wall time{both}; "
                  f"CPU {sum(_CPU.values()):.1f}s")
    tr.write_line("the costliest tests by CPU:")
    for nodeid, cpu in _TEST_CPU.most_common(12):
        tr.write_line(f"  {cpu:6.1f}s  {nodeid}")
    if len(_LANES) > 1:
        tr.write_line("lanes: " + ", ".join(f"{lane} {spent:.1f}s" for lane, spent in sorted(_LANES.items())))


def pytest_collection_finish(session):
    """The lane's heap once collected (the modules, the test items) frozen out of the collector's
    reach; see pytest_runtest_teardown."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """At the end of each test module, its garbage collected, then what lives on frozen. A lane's
    full collections walked every object it ever kept (imported modules, Textual's caches, the
    session's runs): 17-24% of a lane's CPU in tests/tui, replay and faults, 2026-12-06; frozen,
    each walks only what came since (lanes' CPU 84 -> 76 CPU-s over those tests, two lanes). What
    a frozen object holds is never collected: the lanes are short-lived, and module fixtures are
    torn down before this runs."""
    yield
    if nextitem is None or nextitem.module is not item.module:
        gc.collect()
        gc.freeze()


def pytest_sessionfinish(session, exitstatus):
    # pytest's last look for exceptions raised in finalizers (its unraisableexception cleanup, at
    # exit) collects the whole heap five times: 2.4-6.2 CPU-s a lane at the suite's very end, where
    # the lanes all end together (py-spy over a six-lane suite, 2026-12-06). One collection here runs
    # every finalizer due, whose exceptions that cleanup still reports; the survivors are then frozen
    # out of its five.
    gc.collect()
    gc.freeze()
    out = os.environ.get(privilege.OUTCOMES_ENV)
    if out and not hasattr(session.config, "workerinput"):  # the controller has every lane's reports
        with open(out, "w") as f:
            json.dump(_OUTCOMES, f)
    times = os.environ.get(TIMES_ENV)
    if times and not hasattr(session.config, "workerinput"):
        with open(times, "w") as f:
            json.dump({n: [round(_TEST_WALL[n], 2), round(_TEST_CPU[n], 2)] for n in _TEST_WALL}, f, indent=0)


def _say_skips(tr) -> None:
    """Every skip of the run by its reason (pytest's -rs lists them by the line that raised it)."""
    skips = collections.defaultdict(list)
    for nodeid, (outcome, why) in _OUTCOMES.items():
        if outcome == "skipped":
            skips[why].append(nodeid)
    tr.section(f"skipped, by reason: {sum(map(len, skips.values()))}")
    for why, ids in sorted(skips.items(), key=lambda kv: -len(kv[1])):
        tr.write_line(f"{len(ids)}: {why}")
        for nodeid in sorted(ids):
            tr.write_line(f"    {nodeid}")
