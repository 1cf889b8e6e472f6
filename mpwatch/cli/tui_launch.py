"""The CLI's ways into the TUI: `mpwatch SCRIPT` and `mpwatch attach`.

`launch_with_tui` starts the supervisor as its own detached process (own session, stdin
from /dev/null, output to <run_dir>/supervisor.log, the file where its logger appends the
tracebacks of the bugs it caught: supervisor.errors), then shows it like an attach: losing
the terminal ends only the TUI, never the run.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mpwatch.cli.args import die as _die
from mpwatch.cli.listing import ended_text
from mpwatch.rundir import layout, postmortem, reader, registry, writer
from mpwatch.rundir.claim import Claim
from mpwatch.rundir.textfiles import read_json, tail_lines
from mpwatch.settings import Settings
from mpwatch.text import safe
from mpwatch.text.run_end import run_end

if TYPE_CHECKING:
    from mpwatch.sources.local import Client


class LaunchOptions(Protocol):
    """The run's options as the CLI parsed them (what the supervisor's command line needs)."""

    script: str
    args: list[str]
    nprocs: int
    max_restarts: int
    stall_timeout: float
    startup_timeout: float
    grace: float
    resize_mode: str
    gpu_interval: float
    stop_signal: str
    metrics_port: int | None
    metrics_addr: str
    run_id: str | None
    cwd: str
    supervisor_flags: list[str]  # torchrun's flags (-m, --nnodes...), as the supervisor takes them

START_TIMEOUT_S = 30.0


def supervisor_argv(ns: argparse.Namespace, opts: LaunchOptions, taken: Claim) -> list[str]:
    """The supervisor's command line: the run claimed here (its id, its directory, made here:
    the supervisor checks it is that one, by its device and inode) and the run's options."""
    st = os.fstat(taken.fd)
    return [sys.executable, "-m", "mpwatch", "--supervise-only", "--headless",
            "--run-id", taken.run_id, "--run-dir", str(taken.run_dir),
            "--made-run-dir", f"{st.st_dev}:{st.st_ino}",
            "-n", str(opts.nprocs), "--max-restarts", str(opts.max_restarts),
            "--stall-timeout", repr(float(opts.stall_timeout)),
            "--startup-timeout", repr(float(opts.startup_timeout)), "--grace", repr(float(opts.grace)),
            "--resize-mode", opts.resize_mode, "--gpu-interval", repr(float(opts.gpu_interval)),
            "--stop-signal", opts.stop_signal,
            *(["--metrics-port", str(opts.metrics_port), "--metrics-addr", opts.metrics_addr]
              if opts.metrics_port is not None else []),
            *opts.supervisor_flags, opts.script, *opts.args]


def _tail(path: Path, n: int = 8) -> str:
    lines = tail_lines(path, n)
    return ("; last lines of " + str(path) + ":\n  " + "\n  ".join(lines)) if lines else ""


def launch_with_tui(ns: argparse.Namespace, opts: LaunchOptions, settings: Settings, taken: Claim) -> int:
    """Start the supervisor of the run claimed here (cli.launch) and show it."""
    run_dir = taken.run_dir
    sup_log = run_dir / layout.SUPERVISOR_LOG
    try:
        log = writer.open_supervisor_log(taken.fd)  # closed below, once the child has it
    except OSError as exc:
        taken.release()
        return _die(f"cannot create {sup_log}: {exc.strerror}")
    with log:
        try:
            sup = subprocess.Popen(supervisor_argv(ns, opts, taken), stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log, start_new_session=True, close_fds=True)
        except OSError as exc:
            taken.release()
            return _die(f"cannot start the supervisor: {exc.strerror}")
    os.close(taken.fd)  # the supervisor holds its own; the registry entry is its to replace
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (run_dir / layout.CONTROL_JSON).exists():
        if sup.poll() is not None:
            return _die(f"the supervisor exited with code {sup.returncode} before the run started"
                        + _tail(sup_log))
        if time.monotonic() > deadline:
            return _die(f"the supervisor did not start within {START_TIMEOUT_S:g}s (pid {sup.pid})"
                        + _tail(sup_log))
        time.sleep(0.05)
    from mpwatch.sources.local import Client, ClientError

    try:
        client = Client.at(run_dir)
    except ClientError as exc:
        return _die(f"{exc}" + _tail(sup_log))
    return attach_tui(client, settings, mouse=not ns.no_mouse, supervisor=sup)


def attach_tui(client: Client, settings: Settings, mouse: bool = True,
               supervisor: subprocess.Popen[bytes] | None = None) -> int:
    from mpwatch.tui.app import MpwatchApp
    from mpwatch.tui.render import glyphs

    handle = client.handle
    app = MpwatchApp(client, handle.run_dir, glyphs=glyphs.pick(ascii_only=settings.ascii))
    try:
        outcome = app.run(mouse=mouse)
    finally:
        client.close()
    if outcome is None or outcome.kind == "detach":
        if outcome is not None:
            print(safe.text(f"mpwatch: detached from run {handle.run_id}; it goes on "
                            f"('mpwatch attach {handle.run_id}' shows it again)"), file=sys.stderr)
        return 0
    code = outcome.exit_code
    if code is None:
        code = wait_finished(handle, supervisor)
    if outcome.kind == "stopped" and code is not None:
        for line in stopped_lines(handle, code):
            print(safe.text(line), file=sys.stderr)
    return 1 if code is None else int(code)


def stopped_lines(handle: registry.RunHandle, code: int) -> list[str]:
    """After 'stop the run' (q, s): the run, how it ended, and where each rank's end is told.
    `mpwatch summary` finds a finished run by its id in ./mpwatch-runs; elsewhere, by its path."""
    try:
        listing = postmortem.listing(reader.read(handle.run_dir))
        if listing["exit_code"] is None:  # run.json not final yet: the code the TUI was told
            listing["exit_code"] = code
        how = ended_text(listing)
    except (reader.NotARunDir, OSError):
        how = run_end(code)
    by_id = (Path.cwd() / registry.DEFAULT_RUNS / handle.run_id).resolve() == Path(handle.run_dir).resolve()
    name = handle.run_id if by_id else shlex.quote(str(handle.run_dir))
    return [f"mpwatch: run {handle.run_id} ended: {how}",
            f"mpwatch: how each rank ended: mpwatch summary {name}"]


def _code(info: dict[str, object]) -> int | None:
    code = info.get("exit_code")
    return code if isinstance(code, int) else None


def wait_finished(handle: registry.RunHandle, supervisor: subprocess.Popen[bytes] | None = None,
                  timeout: float | None = None) -> int | None:
    """After 'stop the run', wait for the supervisor to write its exit code."""
    info = read_json(handle.run_dir, layout.RUN_JSON) or {}
    grace = float(info.get("options", {}).get("grace", 10.0))
    deadline = time.monotonic() + (timeout if timeout is not None else grace + 30.0)
    print(safe.text(f"mpwatch: waiting for run {handle.run_id} to stop…"), file=sys.stderr)
    while time.monotonic() < deadline:
        info = read_json(handle.run_dir, layout.RUN_JSON) or {}
        if info.get("finished"):
            return _code(info)
        if supervisor is not None and supervisor.poll() is not None:
            return supervisor.returncode
        if supervisor is None and not registry.pid_alive(handle.pid):
            return _code(read_json(handle.run_dir, layout.RUN_JSON) or {})
        time.sleep(0.1)
    print(safe.text(f"mpwatch: run {handle.run_id} is still stopping; see 'mpwatch ls'"), file=sys.stderr)
    return None
