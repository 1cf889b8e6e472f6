"""mpwatch's CLI run by another user: uid 65534 (nobody), a real process of its own started
through setpriv, for the permission cases, which need root: root reads every file and enters
every directory, so a "not readable" case run as root alone proves nothing. A test that asks for
the `nobody` fixture (tests/conftest.py) is marked `root`: as a user, `make test` runs it as root
through a passwordless sudo (tests/privilege.py); it skips, with the reason, where it cannot be.

    def test_x(nobody):
        d = nobody.shared("runs")           # a folder both users reach (root's files in it stay root's)
        res = nobody.mpwatch("ls", "--all", d)   # as uid 65534: exit code, stdout, stderr

Only commands that start no process of their own (ls, summary, prune, ctl, attach's refusals):
a process of nobody's may not be able to run the interpreter (pyenv's lives under /root here).
`nobody.python(...)` runs this interpreter as uid 65534, for what only another user sees (the GPU
driver's refusals). Both import this checkout's mpwatch (PYTHONPATH kept: a worktree's, not the
one installed).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NOBODY = 65534


def why_not() -> str | None:
    """Why this user cannot run a command as uid 65534; None when it can. (A test that asks for
    `nobody` is marked `root`: as a user it skipped before, tests/privilege.py.)"""
    if os.geteuid() != 0:
        return "needs root to become uid 65534"
    if shutil.which("setpriv") is None:
        return "no setpriv (util-linux) to become uid 65534"
    return None


def _kept() -> dict[str, str]:
    """What of this environment uid 65534's process keeps: the checkout it imports mpwatch from (a
    worktree's, not the one installed), and whether bytecode is written."""
    return {k: os.environ[k] for k in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE") if k in os.environ}


class Nobody:
    """Uid 65534 with a home, a runtime directory (0700, its own) and folders root shares with it."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="mpw-nobody-"))
        self.base.chmod(0o755)  # traversable: only the modes below keep either user out
        self.home = self.mine("home")
        self.runtime = self.mine("rt")

    def mine(self, name: str) -> Path:
        """A folder of nobody's own (0700)."""
        d = self.base / name
        d.mkdir(mode=0o700)
        os.chown(d, NOBODY, NOBODY)
        return d

    def shared(self, name: str) -> Path:
        """A folder both reach (0755, root's): what root puts in it keeps root's modes."""
        d = self.base / name
        d.mkdir(mode=0o755, exist_ok=True)
        return d

    def give(self, path: Path) -> Path:
        """Make path (and everything under it) nobody's."""
        for p in [path, *path.rglob("*")]:
            os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": os.environ.get("LANG", "C.UTF-8"),
                "HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.runtime), "MPWATCH_TMPDIR": str(self.home),
                **extra}

    def mpwatch(self, *args: object, cwd: Path | None = None, timeout: float = 60,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`mpwatch ARGS...` as uid 65534 (no groups, no capabilities), to completion."""
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
               sys.executable, "-m", "mpwatch", *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or self.home,
                              env=self.env(**_kept(), **(env or {})))

    def python(self, *args: object, timeout: float = 60,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`python ARGS...` as uid 65534, importing this checkout's mpwatch, to completion."""
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
               sys.executable, *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.home,
                              env=self.env(**_kept(), **(env or {})))

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
