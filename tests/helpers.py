"""Shared harness for tests and benchmarks with real processes: waiting for a condition,
liveness, killing what a run left, a headless mpwatch run in a temp dir. bench/measure.py
imports the process helpers from here: one place for them.

Waiting is always for a condition with a generous deadline (never sleep-and-hope): the
CI machine has 2 cores and may be busy.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mpwatch.contract import ENV_RUN
from mpwatch.rundir import reader
from mpwatch.sources.local import Client
from tests import privilege

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
MPWATCH = [sys.executable, "-m", "mpwatch"]


class WaitTimeout(AssertionError, TimeoutError):
    """A condition that never came: a test failure to pytest, a TimeoutError to a bench."""


FAST_S = 5.0  # a condition not met this far into a wait waits on a run's clock (a timeout, a finding's hold):
SLOW_INTERVAL_S = 0.2  # from then on it is polled this often at most: a poll of a status costs the run's
# supervisor and this lane a millisecond each, and six lanes polling 20 times a second through such waits
# spent 28 CPU-s of a suite more (the lanes 177 CPU-s, 149 since; scripts/suite_cpu.py, 2026-12-06)


def wait_for(pred, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll pred() until it returns a truthy value; return it, or fail after timeout. Every
    `interval` for the first FAST_S seconds, then every SLOW_INTERVAL_S (a longer interval stands)."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        value = pred()
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval if now - start < FAST_S else max(interval, SLOW_INTERVAL_S))


def alive(pid: int) -> bool:
    """True when pid is a live, non-zombie process."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants(*pids: int) -> list[int]:
    """The live descendants of the pids, from one read of the process table however many pids
    there are (psutil's children(recursive=True) reads all of /proc for each: a cleanup of 256
    ranks read it 256 times)."""
    kids: dict[int, list[int]] = {}
    for p in psutil.process_iter(["ppid"]):
        kids.setdefault(p.info["ppid"], []).append(p.pid)
    out, todo, seen = [], list(pids), set(pids)
    while todo:
        for child in kids.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                todo.append(child)
    return out


def of_run(run_id: str) -> set[int]:
    """Every live process in the whole process table whose environment carries the run's id
    (MPWATCH_RUN_ID: the supervisor gives it to each worker, their children inherit it): a
    grandchild re-parented to init, or one in a session of its own, is found too."""
    found = set()
    for p in psutil.process_iter():
        try:
            if p.environ().get(ENV_RUN) == run_id and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.Error:  # gone meanwhile, or another user's we may not read
            continue
    return found


def helpers_of(sup_pid: int) -> list[int]:
    """The supervisor's own helper processes (its watchdog, its forkserver: supervisor.preload)."""
    try:
        return [c.pid for c in psutil.Process(sup_pid).children()
                if any("watchdog.py" in part or part == "exec(input())" for part in c.cmdline())]
    except psutil.Error:
        return []


def assert_run_gone(run_id: str, pids=(), timeout: float = 30.0):
    """Nothing of the run is left: no process in the table with its run id, and none of the
    pids (its supervisor, its watchdog...); fails naming the survivors and what they are."""
    def left() -> set[int]:
        return of_run(run_id) | {p for p in pids if alive(p)}
    try:
        wait_for(lambda: not left(), timeout, what="the run's processes to end")
    except WaitTimeout:
        raise WaitTimeout(f"still alive after {timeout:g}s: {describe(left())}") from None


def describe(pids) -> str:
    out = []
    for pid in sorted(pids):
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} ({p.status()}, ppid {p.ppid()}: {' '.join(p.cmdline())[:80]})")
        except psutil.Error:
            out.append(f"{pid} (gone)")
    return ", ".join(out)


def kill_all(pids):
    """SIGKILL each pid and its process group (each worker leads its own); for cleanups."""
    for pid in set(pids):
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


def one_line_error(res, words: str):
    """A bad input's answer: exit code 2, nothing on stdout, one line on stderr naming it."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == "", res.stdout
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("mpwatch: error: ") and words in lines[0], lines[0]
    assert "Traceback" not in res.stderr


def mpwatch(*args, env=None, timeout=60, cwd=None, input=None) -> subprocess.CompletedProcess:
    """Run an mpwatch command to completion and capture its output."""
    return subprocess.run([*MPWATCH, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd, input=input)


class HeadlessRun:
    """`mpwatch --headless` as a subprocess, with its run directory under tmp_path."""

    def __init__(self, tmp_path: Path, script, *args, n: int = 2, opts=(), env=None, cwd: Path | None = None):
        self.tmp = Path(tmp_path)
        self.cwd = self.tmp if cwd is None else Path(cwd)  # where the supervisor (and so its workers) start
        self.run_dir = self.tmp / "run"
        self.script = str(script)
        self.args = [str(a) for a in args]
        self.n = n
        self.opts = [str(o) for o in opts]
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("MPWATCH_STRICT_STATES", "1")  # a state change its table lacks raises: a bug
        self.proc: subprocess.Popen | None = None
        self.seen_pids: set[int] = set()
        self.helpers: set[int] = set()  # the supervisor's watchdog, once seen
        self.listed = False  # the status has listed all n workers once (status())

    def start(self) -> HeadlessRun:
        self.start_at_once()
        wait_for(lambda: (self.run_dir / "control.json").exists() or self.proc.poll() is not None,
                 what="the supervisor to start")
        return self

    def start_at_once(self) -> HeadlessRun:
        """The supervisor's process, started; not waiting for anything of it."""
        self.out = open(self.tmp / "mpwatch.out", "wb")  # noqa: SIM115 - closed in cleanup()
        self.err = open(self.tmp / "mpwatch.err", "wb")  # noqa: SIM115 - closed in cleanup()
        cmd = [*MPWATCH, "--headless", "-n", str(self.n), "--run-dir", str(self.run_dir),
               *self.opts, self.script, *self.args]
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, env=self.env,
                                     cwd=self.cwd, start_new_session=True)
        return self

    @property
    def stderr_text(self) -> str:
        return (self.tmp / "mpwatch.err").read_text(errors="replace")

    def log(self, rank: int, stream: str = "stdout") -> str:
        """A rank's log so far ("" before the worker has started)."""
        try:
            return (self.run_dir / f"rank-{rank}" / f"{stream}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def events(self, kind: str | None = None) -> list[dict]:
        out = []
        for rec in reader.read_events(self.run_dir):
            if rec.get("event") == "worker_started":
                self.seen_pids.add(rec["pid"])
            if kind is None or rec.get("event") == kind:
                out.append(rec)
        return out

    def wait_event(self, kind: str, pred=None, timeout: float = 30.0, count: int = 1) -> list[dict]:
        def found():
            recs = [r for r in self.events(kind) if pred is None or pred(r)]
            return recs if len(recs) >= count else None
        return wait_for(found, timeout, what=f"{count} '{kind}' event(s)")

    def wait_declared(self, name: str, timeout: float = 120) -> None:
        """Every rank of the status declared tunable `name` (a `tunable_declared` event is the
        run's first declaration only: by whichever rank came first), and steps at a known pace
        (a change's step is picked from it)."""
        def done() -> bool:
            st = self.status()
            t = next((t for t in st["tunables"] if t["name"] == name), None)
            ranks = sorted(w["rank"] for w in st["workers"])
            return t is not None and t["ranks"] == ranks and all(w["steps_per_s"] for w in st["workers"])
        wait_for(done, timeout, what=f"every rank declaring {name}, at a known pace")

    def ctl(self, *args, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        res = mpwatch("ctl", "--run", self.run_dir, *args, timeout=timeout)
        if check:
            assert res.returncode == 0, f"ctl {args} failed: {res.stderr}"
        return res

    def status(self) -> dict:
        """The run's status as `ctl status --json` prints it, asked over the control socket
        in this process: tests poll it, and a `python -m mpwatch ctl` per poll cost the suite
        over a thousand interpreters (130 s of CPU). tests/cli checks that ctl prints the same.

        A supervisor answers before it has started its workers, and lists them as it starts
        them: until a single-node run has listed all -n of them once (or its supervisor has
        ended), ask again, so that no test reads "every worker ..." of none or some, nor looks
        a rank up before it is there. A node of a multi-node run lists none while torch's
        rendezvous forms: its tests read that state as it is."""
        def ask() -> dict | None:
            with Client.at(self.run_dir) as client:
                st = json.loads(json.dumps(client.status(), default=str))
            self.listed = self.listed or len(st["workers"]) >= self.n
            ended = self.proc is None or self.proc.poll() is not None
            return st if self.listed or ended or st["run"].get("node") else None
        return wait_for(ask, 60, interval=0.02, what=f"the supervisor to list its {self.n} workers")

    def worker(self, rank: int) -> dict:
        return next(w for w in self.status()["workers"] if w["rank"] == rank)

    def wait_state(self, rank: int, state: str, timeout: float = 30.0) -> dict:
        return wait_for(lambda: (lambda w: w if w["state"] == state else None)(self.worker(rank)),
                        timeout, what=f"rank {rank} to be {state}")

    def news(self) -> str:
        """Its last events but reports, a line each: where a failure's message says the run stood."""
        news = [e for e in self.events() if e.get("event") != "report"][-12:]
        return "\n".join(json.dumps(e)[:300] for e in news)

    def where(self) -> str:
        """Where the run stood, for a failure's message: the supervisor's exit code (or that it
        lives), its last events but reports, the tails of its stderr and supervisor.log."""
        code = self.proc.poll() if self.proc is not None else None
        try:
            log = (self.run_dir / "supervisor.log").read_text(errors="replace")[-2000:]
        except OSError:
            log = ""
        return (f"the supervisor {'lives' if code is None else f'exited with {code}'}; its last events:\n"
                f"{self.news()}\nits stderr ends:\n{self.stderr_text[-2000:]}\nsupervisor.log ends:\n{log}")

    def wait_exit(self, timeout: float = 60.0) -> int:
        """The supervisor's exit code; past `timeout`, a failure that says where the run stood
        (its last events but reports: a stall, the stacks dumped), not a bare TimeoutExpired."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the supervisor did not exit within {timeout:g}s; its last events:\n"
                                 f"{self.news()}") from None

    @property
    def run_id(self) -> str:
        return json.loads((self.run_dir / "run.json").read_text())["run_id"]

    def all_pids(self) -> set[int]:
        """Every worker pid this run started, plus their live descendants now."""
        self.events()
        pids = set(self.seen_pids)
        pids.update(descendants(*pids))
        if self.proc is not None and self.proc.poll() is None:
            self.helpers.update(helpers_of(self.proc.pid))
        return pids

    def assert_gone(self, *extra: int, timeout: float = 30.0):
        """The end of a fault case: the supervisor has exited, and nothing of the run is left
        in the whole process table (by its run id, tests.helpers.of_run), nor any worker pid
        it started, nor its watchdog, nor the `extra` pids."""
        pids = self.all_pids() | self.helpers | set(extra)
        if self.proc is not None:
            pids.add(self.proc.pid)
        assert_run_gone(self.run_id, pids, timeout)

    def cleanup(self):
        """Never leak processes from a test, whatever happened in it."""
        pids = self.all_pids()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        kill_all(pids)
        for f in ("out", "err"):
            if hasattr(self, f):
                getattr(self, f).close()


def internal_errors(folder: Path, bugs: bool = True) -> list[str]:
    """What the supervisors of the runs under `folder` said was their own fault: each run's
    `internal` alerts, and (with `bugs`) the bugs logged to its supervisor.log. Read as mpwatch
    reads a run's files (rundir.textfiles): a line at a time, a line past 4 MiB passed over (a
    hostile test leaves a 1 GiB one), only lines holding the needle parsed, never through a link
    nor from a FIFO a hostile test left where one of these files goes."""
    from mpwatch.rundir import textfiles
    from mpwatch.supervisor import errors

    out = []
    for path in folder.rglob("events.jsonl"):
        try:
            out += [f"internal alert: {rec['message']}" for rec in textfiles.read_jsonl(path, ["alert"], ['"internal"'])
                    if rec.get("kind") == "internal"]
        except OSError:  # a link or a FIFO in its place
            continue
    for path in folder.rglob(errors.FILE_NAME) if bugs else ():
        try:
            with textfiles.open_regular(path) as f:
                out += [f"bug in {path}: {line.decode(errors='replace').rstrip()}"
                        for line in textfiles.bounded_lines(f) if b" ERROR [" in line]
        except OSError:
            continue
    return out


def assert_gone(pids, timeout: float = 15.0):
    """Every pid ends (zombies count as gone); fails naming the survivors."""
    wait_for(lambda: not [p for p in pids if alive(p)], timeout,
             what=f"processes to end; still alive: {[p for p in pids if alive(p)]}")


def keep_run_dir(run_dir: Path, dest: Path) -> None:
    """A copy of a recorded run's directory for tests/*/data (without its key and its
    supervisor's crash file, which are of that machine only)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(run_dir, dest, ignore=shutil.ignore_patterns("control.json", "faulthandler.out"))


def mount_tmpfs(path: Path, size: str = "1m") -> str | None:
    """Mount a small tmpfs at path (a real file system that fills up), this user's; None when
    done, else why it could not be. As root, or through a passwordless sudo (tests/privilege.py).
    Undo it with umount()."""
    if not (privilege.is_root() or privilege.sudo()):
        return "mounting a small tmpfs needs root: not root here, and no passwordless sudo"
    if shutil.which("mount") is None:
        return "no mount command"
    path.mkdir()
    opts = f"size={size},mode=0755,uid={os.getuid()},gid={os.getgid()}"
    name = f"mpwatch-test-{os.urandom(4).hex()}"
    res = subprocess.run(privilege.as_root(["mount", "-t", "tmpfs", "-o", opts, name, str(path)]),
                         capture_output=True, text=True)
    if res.returncode != 0:
        return f"cannot mount a tmpfs here (no CAP_SYS_ADMIN?): {res.stderr.strip()}"
    return None


def umount(path: Path) -> None:
    subprocess.run(privilege.as_root(["umount", str(path)]), capture_output=True)
    if os.path.ismount(path):
        subprocess.run(privilege.as_root(["umount", "-l", str(path)]), capture_output=True)


def need(module: str, reason: str = "needs torch (pip install -e '.[demo]')") -> None:
    """Skip (the module, or the test or fixture that calls it) where `module` is not installed,
    without importing it, as pytest.importorskip does: most tests that need torch need it only in
    the processes they start, and importing it costs each lane ~1.8 CPU-s."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(reason, allow_module_level=True)


# ------------------------------------------------------ a machine taken (issue 41) ----
def pin(pid: int, cpu: int) -> None:
    """Every thread of the process onto one CPU (threads it starts later inherit its main thread's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except OSError:
            pass  # a thread that just ended


def set_priority(pid: int, nice: int) -> bool:
    """The process's priority among the others: its autogroup's (where the kernel groups a session's
    processes) and its threads'. False where this user may not raise it (a negative nice)."""
    try:
        group = Path(f"/proc/{pid}/autogroup")
        if group.is_file():
            group.write_text(str(nice))
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        return True
    except PermissionError:
        return False


# The busy processes' nice: two of them at -15 (weight 29,154 each) above three ranks at -5 (3,121
# each) leave the ranks a seventh of their CPU, and the run's pace far under the slowdown's margin
# (contract.slowdown.APPEAR) whatever the machine's noise; at -10 (9,548) a third, and a fresh-clone
# suite in six lanes once read 0.75. Each still takes over 40% of the CPU: the busiest outsiders.
BUSY_NICE = -15


class TakenMachine:
    """A run's ranks on the last CPU above every other job of this machine (nice -5: the noise of the
    tests beside it leaves their pace alone), then busy processes (`while True: pass`, sessions of
    their own) on the same CPU above them (BUSY_NICE) until `stop`: another job taking the machine
    from the run, and only from it. Where priorities cannot be raised: everything at nice 0,
    three busy processes instead of two."""

    def __init__(self) -> None:
        self.cpu = max(os.sched_getaffinity(0))
        self.raised = True

    def hold(self, pids: list[int]) -> None:
        for pid in pids:
            pin(pid, self.cpu)
            self.raised = set_priority(pid, -5) and self.raised

    def start(self) -> list[subprocess.Popen]:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                 for _ in range(2 if self.raised else 3)]
        for p in procs:
            pin(p.pid, self.cpu)
            set_priority(p.pid, BUSY_NICE if self.raised else 0)
        return procs

    @staticmethod
    def stop(procs: list[subprocess.Popen]) -> None:
        for p in procs:
            p.kill()
            p.wait()
