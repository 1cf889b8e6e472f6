"""Where live runs are found: the per-user runtime directory and the run registry.

Sockets live in a directory only this user may enter ($XDG_RUNTIME_DIR/mpwatch, or
/tmp/mpwatch-<uid>), checked for owner and mode before use, so another user can neither
connect nor learn the socket names. Each live run has an entry runs/<id>.json there.
A RUN given on the command line is a run id or a run directory.
"""
from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from mpwatch import runstore


class RunError(Exception):
    """A RUN that cannot be used; its message is the one line the user sees."""


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    uid = os.getuid()
    if base and os.path.isdir(base) and os.access(base, os.W_OK):
        path = Path(base) / "mpwatch"
    else:
        path = Path(os.environ.get("MPWATCH_TMPDIR", "/tmp")) / f"mpwatch-{uid}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        (path / "runs").mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise RunError(f"cannot use runtime directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        raise RunError(f"runtime directory {path} is not a private directory of this user")
    return path


def new_run_id(script: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(script).stem)[:32] or "run"
    base = time.strftime("%Y%m%d-%H%M%S") + "-" + stem
    reg = runtime_dir() / "runs"
    run_id, n = base, 1
    while (reg / f"{run_id}.json").exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def register(run_id: str, entry: dict):
    path = runtime_dir() / "runs" / f"{run_id}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(entry, f)


def unregister(run_id: str):
    try:
        (runtime_dir() / "runs" / f"{run_id}.json").unlink()
    except (OSError, RunError):
        pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_runs() -> list[dict]:
    """Registered runs whose supervisor is alive, newest first; stale entries are removed."""
    out = []
    reg = runtime_dir() / "runs"
    for path in reg.glob("*.json"):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not pid_alive(int(entry.get("pid", 0))):
            path.unlink(missing_ok=True)
            continue
        out.append(entry)
    out.sort(key=lambda e: e.get("started", 0), reverse=True)
    return out


@dataclass
class RunHandle:
    run_id: str
    run_dir: Path
    address: str
    authkey: bytes
    pid: int


def resolve(run: str | None) -> RunHandle:
    """Find a live run by id or directory; None means the newest live run."""
    if run is None:
        runs = live_runs()
        if not runs:
            raise RunError("no live mpwatch run of this user (start one with: mpwatch SCRIPT)")
        run_dir = Path(runs[0]["run_dir"])
    else:
        entry = None
        if "/" not in run and run not in (".", ".."):
            for e in live_runs():
                if e.get("run_id") == run:
                    entry = e
        if entry is not None:
            run_dir = Path(entry["run_dir"])
        elif os.path.isdir(run):
            run_dir = Path(run)
        else:
            raise RunError(f"no such run: {run} (see 'mpwatch ls')")
    if not os.access(run_dir, os.R_OK | os.X_OK):
        raise RunError(f"run directory {run_dir} is not readable by this user")
    info = runstore.read_json(run_dir, runstore.RUN_JSON)
    if info is None:
        raise RunError(f"{run_dir} is not an mpwatch run directory (no readable run.json)")
    if info.get("finished"):
        code = info.get("exit_code")
        raise RunError(f"run {info.get('run_id', run_dir)} has finished (exit code {code}); "
                       f"its files are in {run_dir}")
    ctl = runstore.read_json(run_dir, runstore.CONTROL_JSON)
    if ctl is None:
        raise RunError(f"run {info.get('run_id')} has no readable control.json (another user's run?)")
    if not pid_alive(int(ctl.get("pid", 0))):
        raise RunError(f"run {info.get('run_id')} is not running (its supervisor is gone); "
                       f"its files are in {run_dir}")
    return RunHandle(run_id=info.get("run_id", run_dir.name), run_dir=run_dir,
                     address=ctl["address"], authkey=bytes.fromhex(ctl["authkey"]),
                     pid=int(ctl["pid"]))
