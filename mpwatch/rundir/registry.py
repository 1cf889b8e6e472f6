"""Where runs are found: the per-user runtime directory and the run registry (live runs),
and the runs folders (finished runs).

Sockets live in a directory only this user may enter ($XDG_RUNTIME_DIR/mpwatch, or
<MPWATCH_TMPDIR>/mpwatch-<uid>: the caller hands in settings.Settings.tmpdir), checked for
owner and mode before use, so another user can neither
connect nor learn the socket names. Each live run has an entry runs/<id>.json there; it
is removed when the run ends, so a finished run is found in a runs folder (DEFAULT_RUNS
by default) by its directory. A RUN given on the command line is a run id or a run
directory: `resolve` wants a live one (ctl, attach), `find_run_dir` takes either
(summary, ctl logs). Runs on the caller's thread.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from mpwatch.contract import as_float, as_time
from mpwatch.rundir import layout, textfiles

DEFAULT_RUNS = Path(layout.RUNS_FOLDER)  # where a run's directory goes, relative to its cwd
SUFFIX_CHARS = 8  # the random end of a run id
STEM_MAX = 32  # characters of the script's name in a run id
SOCKET_PATH_MAX = 107  # bytes of an AF_UNIX socket's path (sun_path, less its NUL)
SOCKET_KINDS = ("ctl", "chan")  # <run id>.ctl, <run id>.chan in the runtime directory (supervisor.core)


class RunError(Exception):
    """A RUN that cannot be used; its message is the one line the user sees."""


def runtime_dir(tmpdir: Path) -> Path:
    """tmpdir: where it goes without a usable XDG_RUNTIME_DIR (settings.Settings.tmpdir).
    The directory is checked (a real directory of this user's, 0700, never through a symlink)
    before anything is made inside it: another user may have made it first."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    uid = os.getuid()
    if base and os.path.isdir(base) and os.access(base, os.W_OK):
        path = Path(base) / "mpwatch"
    else:
        path = tmpdir / f"mpwatch-{uid}"
    for d in (path, path / "runs"):
        try:
            d.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(d)
        except OSError as exc:
            raise RunError(f"cannot use runtime directory {path}: {exc.strerror}") from None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
            raise RunError(f"runtime directory {d} is not a private directory of this user")
    return path


def run_id_base(script: str, when: float | None = None) -> str:
    """A run id's readable part: the start time and the script's name."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(script).stem)[:STEM_MAX] or "run"
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(when)) + "-" + stem


def new_run_id(script: str) -> str:
    """`<time>-<script>-<suffix>`: the suffix is random (SUFFIX_CHARS hex digits), so nobody can
    know a run's id, or its directory's name, before it starts. Not reserved: see claim()."""
    return f"{run_id_base(script)}-{secrets.token_hex(SUFFIX_CHARS // 2)}"


def reserve(run_id: str, entry: RegistryEntry, tmpdir: Path) -> bool:
    """Take run_id in the registry (runs/<id>.json made with O_EXCL); False when it is taken.
    The entry names this process until the supervisor registers itself in its place."""
    path = runtime_dir(tmpdir) / "runs" / f"{run_id}.json"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(entry, f)
    return True


class RegistryEntry(TypedDict):
    """runs/<id>.json, and one row of `mpwatch ls --json`."""

    run_id: str
    run_dir: str  # absolute
    pid: int  # the supervisor's
    script: str
    started: float
    nprocs: int


def register(run_id: str, entry: RegistryEntry, tmpdir: Path) -> None:
    """The run's entry, written whole (a reader never sees half of it)."""
    reg = runtime_dir(tmpdir) / "runs"
    tmp = reg / f".{run_id}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(entry, f)
    os.replace(tmp, reg / f"{run_id}.json")


def unregister(run_id: str, tmpdir: Path) -> None:
    try:
        (runtime_dir(tmpdir) / "runs" / f"{run_id}.json").unlink()
    except (OSError, RunError):
        pass


def run_ended(run_dir: Path | str, pid: int) -> bool:
    """Its run.json says it finished, or its supervisor is gone (a lost socket is then the end)."""
    info = textfiles.read_json(run_dir, layout.RUN_JSON) or {}
    return bool(info.get("finished")) or not pid_alive(pid)


def pid_alive(pid: int) -> bool:
    """A process of that pid is there. A pid read from a file may be anything: 0 or a negative
    one (a process group, every process) or one past any pid (os.kill's OverflowError) is none."""
    if type(pid) is not int or not 0 < pid < 1 << 31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _entry(raw: object) -> RegistryEntry | None:
    if not isinstance(raw, dict):
        return None
    want: dict[str, type | tuple[type, ...]] = {"run_id": str, "run_dir": str, "pid": int, "script": str,
                                                "started": (int, float), "nprocs": int}
    if not all(isinstance(raw.get(k), t) and not isinstance(raw.get(k), bool) for k, t in want.items()):
        return None
    if as_time(raw["started"]) is None:  # a time no clock shows (`ls` prints it)
        return None
    return RegistryEntry(run_id=raw["run_id"], run_dir=raw["run_dir"], pid=raw["pid"], script=raw["script"],
                         started=float(raw["started"]), nprocs=raw["nprocs"])


def live_runs(tmpdir: Path) -> list[RegistryEntry]:
    """Registered runs whose supervisor is alive, newest first; stale entries are removed, and
    then the sockets no live supervisor owns (sweep_sockets). tmpdir: settings.Settings.tmpdir."""
    out = _live_entries(tmpdir)
    sweep_sockets(tmpdir)
    return out


def sweep_sockets(tmpdir: Path) -> list[str]:
    """Remove the sockets of supervisors that died without closing them (SIGKILL): in the
    runtime directory, a `<id>.ctl` or `<id>.chan` of this user's that is a socket itself (not
    a link), whose id has no registry entry left (live_runs removed those of dead supervisors;
    a starting run reserves its entry before it binds), and that refuses a connection (nobody
    listens: proof its supervisor is gone). The names removed."""
    rt = runtime_dir(tmpdir)
    taken = {p.stem for p in (rt / "runs").glob("*.json")}
    removed = []
    for entry in os.scandir(rt):
        stem, dot, ext = entry.name.rpartition(".")
        if not dot or ext not in SOCKET_KINDS or not stem or stem in taken:
            continue
        try:
            st = os.lstat(entry.path)
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid() and _nobody_listens(entry.path):
            try:
                os.unlink(entry.path)
                removed.append(entry.name)
            except OSError:
                pass
    return removed


def _nobody_listens(path: str) -> bool:
    """True only when a connection to the socket is refused (no process listens on it); a
    listener, even one too busy to accept (EAGAIN), or any other error: False."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.setblocking(False)
        try:
            s.connect(path)
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


def _live_entries(tmpdir: Path) -> list[RegistryEntry]:
    out = []
    reg = runtime_dir(tmpdir) / "runs"
    for path in reg.glob("*.json"):
        try:  # (the folder is this user's, 0700; its files read all the same as any run file)
            entry = _entry(textfiles.read_json_file(path)[0])
        except (OSError, ValueError):
            continue
        if entry is None:
            continue
        if not pid_alive(entry["pid"]):
            path.unlink(missing_ok=True)
            continue
        out.append(entry)
    out.sort(key=lambda e: e["started"], reverse=True)
    return out


@dataclass
class RunHandle:
    run_id: str
    run_dir: Path
    address: str
    authkey: bytes
    pid: int


def _lexists(path: Path) -> bool:
    """Something is at path (a link counts as itself); False where this user may not look."""
    try:
        os.lstat(path)
        return True
    except OSError:
        return False


def _real_dir(path: Path) -> bool:
    """A directory itself, not a link to one; False where this user may not look."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def run_dirs(folder: Path, unreadable: list[Path] | None = None) -> list[Path]:
    """The run directories in a runs folder (each holds run.json or events.jsonl). A folder
    this user may not enter (another user's run) is left out, and added to `unreadable`."""
    try:
        subs = sorted(folder.iterdir())
    except OSError:
        return []
    out = []
    for d in subs:
        if not _real_dir(d):
            continue
        if not os.access(d, os.R_OK | os.X_OK):
            if unreadable is not None:
                unreadable.append(d)
            continue
        if _lexists(d / layout.RUN_JSON) or _lexists(d / layout.EVENTS):
            out.append(d)
    return out


def unreadable_note(dirs: list[Path]) -> str:
    """What a listing says of the folders it could not read."""
    shown = ", ".join(str(d) for d in dirs[:3]) + (f" and {len(dirs) - 3} more" if len(dirs) > 3 else "")
    return f"skipped {len(dirs)} folder(s) this user may not read (another user's runs?): {shown}"


def _is_id(run: str) -> bool:
    return "/" not in run and run not in (".", "..")


def _finished_by_id(run_id: str, folders: Iterable[Path], unreadable: list[Path]) -> Path | None:
    """A run directory named run_id (the default name), or whose run.json says run_id;
    folders this user may not read are skipped (into `unreadable`)."""
    for folder in folders:
        d = folder / run_id
        if _real_dir(d):
            return d
        for d in run_dirs(folder, unreadable):
            info = textfiles.read_json(d, layout.RUN_JSON)
            if info is not None and info.get("run_id") == run_id:
                return d
    return None


def find_run_dir(run: str | None, tmpdir: Path, folders: Iterable[Path] = (DEFAULT_RUNS,)) -> Path:
    """A live or finished run's directory: by path, by live id, by id in the runs folders.
    None: the newest live run, else the newest run in the runs folders."""
    folders = list(folders)
    if run is None:
        live = live_runs(tmpdir)
        if live:
            return Path(live[0]["run_dir"])
        found = [d for f in folders for d in run_dirs(f)]
        if not found:
            raise RunError("no live run of this user and no run in " + ", ".join(f"./{f}" for f in folders))
        return max(found, key=_started)
    if _is_id(run):
        for e in live_runs(tmpdir):
            if e["run_id"] == run:
                return Path(e["run_dir"])
    if os.path.isdir(run):
        return Path(run)
    if os.path.exists(run):
        raise RunError(f"{run} is not a run directory (not a directory)")
    unreadable: list[Path] = []
    d = _finished_by_id(run, folders, unreadable) if _is_id(run) else None
    if d is None:
        where = ", ".join(f"./{f}" for f in folders)
        skipped = f"; {len(unreadable)} folder(s) there this user may not read" if unreadable else ""
        raise RunError(f"no such run: {run} (see 'mpwatch ls --all'; finished runs are looked for in {where}"
                       f"{skipped})")
    return d


def _started(d: Path) -> float:
    info = textfiles.read_json(d, layout.RUN_JSON) or {}
    started = as_float(info.get("started"))
    if started is not None:
        return started
    try:
        return d.stat().st_mtime
    except OSError:
        return 0.0


def resolve(run: str | None, tmpdir: Path) -> RunHandle:
    """A live run by id or directory; None means the newest live run. A finished run (by
    directory, or by id in the runs folder) is an error that says it has finished."""
    if run is None:
        runs = live_runs(tmpdir)
        if not runs:
            raise RunError("no live mpwatch run of this user (start one with: mpwatch SCRIPT)")
        return handle(Path(runs[0]["run_dir"]))
    return handle(find_run_dir(run, tmpdir))


def handle(run_dir: Path) -> RunHandle:
    """The live run whose directory is run_dir: how to reach its control socket. A finished
    run, a garbled control.json or a supervisor that is gone is a RunError that says so."""
    if not os.access(run_dir, os.R_OK | os.X_OK):
        raise RunError(f"run directory {run_dir} is not readable by this user")
    info = textfiles.read_json(run_dir, layout.RUN_JSON)
    if info is None:
        raise RunError(f"{run_dir} is not an mpwatch run directory (no readable {layout.RUN_JSON})")
    run_id = str(info.get("run_id", run_dir.name))
    if info.get("finished"):
        code = info.get("exit_code")
        raise RunError(f"run {run_id} has finished (exit code {code}); its files are in {run_dir} "
                       f"(see 'mpwatch summary {run_dir}')")
    ctl = textfiles.read_json(run_dir, layout.CONTROL_JSON)
    if ctl is None:
        raise RunError(f"run {run_id} has no readable {layout.CONTROL_JSON} (another user's run?)")
    try:
        pid, address, authkey = int(ctl["pid"]), str(ctl["address"]), bytes.fromhex(ctl["authkey"])
    except (KeyError, TypeError, ValueError):
        raise RunError(f"run {run_id} has a garbled {layout.CONTROL_JSON}") from None
    if not pid_alive(pid):
        raise RunError(f"run {run_id} is not running (its supervisor is gone); its files are in {run_dir}")
    return RunHandle(run_id=run_id, run_dir=run_dir, address=address, authkey=authkey, pid=pid)
