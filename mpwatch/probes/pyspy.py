"""Optional native stacks through py-spy, when it is installed and ptrace is permitted; and
a flame graph of N seconds of a process (`record`: a profile of a rank without torch).

py-spy reads another process's memory (process_vm_readv) and, with --native, attaches
with ptrace to unwind C frames: it sees what faulthandler cannot (the C/C++ frames under
a collective, a stopped process with --nonblocking). Its exit status cannot be trusted
(some versions exit 0 after an error), so success is read from its output: a good dump
names the process and at least one thread. Runs on the caller's thread (a dump thread of
the supervisor): each call waits for py-spy, at most TIMEOUT_S (a record: its seconds and RECORD_SLACK_S).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

from mpwatch.contract import numtext

NOTE_MAX = 300  # characters of py-spy's own words in a note (contract.actions.WHY_MAX)
OUTPUT_MAX = 4 << 20  # bytes of each of py-spy's streams read (it prints the target's names: bounded)
TIMEOUT_S = 10.0
RECORD_SLACK_S = 30.0  # a record's py-spy may take this long past its seconds (attaching, writing)
_DENIED = ("permission denied", "operation not permitted", "ptrace", "os error 1)", "os error 13")


def find() -> str | None:
    """The py-spy binary: next to this interpreter (a venv's bin) or on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("py-spy")


def ptrace_scope() -> int | None:
    """Yama's ptrace_scope (0-3), None where Yama is absent."""
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
    except (OSError, ValueError):
        return None


def judge(output: str) -> tuple[bool, str | None]:
    """(ok, note) from py-spy's combined output; the note explains a failure in one line."""
    if "Thread " in output and "Process " in output:
        return True, None
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    err = next((ln for ln in lines if ln.startswith("Error:")), lines[0] if lines else "no output")
    causes = [ln for ln in lines if numtext.int_of(ln[:2].rstrip(":"), 2) is not None and ":" in ln[:4]]
    text = " ".join([err] + causes[:1])[:NOTE_MAX]
    if any(d in output.lower() for d in _DENIED):
        scope = ptrace_scope()
        hint = f" (kernel.yama.ptrace_scope={scope})" if scope else ""
        return False, f"py-spy: ptrace not permitted{hint}: {text}"
    return False, f"py-spy failed: {text}"


def dump(pid: int, native: bool = False, nonblocking: bool = False,
         exe: str | None = None, timeout: float = TIMEOUT_S) -> tuple[bool, str]:
    """(ok, text): the dump, or a one-line reason it could not be taken.
    --native needs to stop the process briefly; --nonblocking never does (and is the only
    mode that works on a stopped process), so the two are not combined."""
    exe = exe or find()
    if exe is None:
        return False, "py-spy is not installed (pip install py-spy for native stacks)"
    argv = [exe, "dump", "--pid", str(pid)]
    if nonblocking:
        argv.append("--nonblocking")
    elif native:
        argv.append("--native")
    try:
        _, stdout, stderr = _run(argv, timeout)
    except subprocess.TimeoutExpired:
        return False, f"py-spy did not answer in {timeout:g}s"
    except OSError as exc:
        return False, f"py-spy could not run: {exc.strerror}"
    ok, note = judge(stdout + stderr)
    return (True, stdout) if ok else (False, note or "py-spy failed")


def _run(argv: list[str], timeout: float, pass_fds: tuple[int, ...] = (),
         env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of py-spy, each stream's first OUTPUT_MAX bytes (spooled to
    unlinked files: never all held). Raises subprocess.TimeoutExpired, OSError."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        res = subprocess.run(argv, stdout=out, stderr=err, timeout=timeout, stdin=subprocess.DEVNULL,
                             pass_fds=pass_fds, env=env)
        return res.returncode, _head(out), _head(err)


def _head(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read(OUTPUT_MAX).decode("utf-8", errors="replace")


def record(pid: int, seconds: int, out: str, pass_fds: tuple[int, ...] = (),
           env: dict[str, str] | None = None, exe: str | None = None) -> tuple[bool, str | None]:
    """A flame graph (SVG) of `seconds` of the process, sampled without stopping it, written
    by py-spy to `out`: (True, None), or (False, the one line that says why not)."""
    exe = exe or find()
    if exe is None:
        return False, "py-spy is not installed (pip install py-spy)"
    # --idle: where a rank waits (a sleep, a collective, a read) is what its profile is asked for
    # (it waits on its peers, or they on it); without it a rank asleep most of the time can have no
    # sample at all ("No stack counts found") and no flame graph.
    argv = [exe, "record", "--pid", str(pid), "--duration", str(seconds), "--format", "flamegraph",
            "--output", out, "--nonblocking", "--idle"]
    try:
        code, stdout, stderr = _run(argv, seconds + RECORD_SLACK_S, pass_fds, env)
    except subprocess.TimeoutExpired:
        return False, f"py-spy did not end in {seconds + RECORD_SLACK_S:g}s"
    except OSError as exc:
        return False, f"py-spy could not run: {exc.strerror}"
    if code == 0:
        return True, None  # the caller checks what was written: py-spy's exit status is not to be trusted
    _, note = judge(stdout + stderr)
    return False, note or f"py-spy failed (exit {code})"
