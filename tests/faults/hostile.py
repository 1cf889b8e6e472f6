"""Helpers of the hostile-neighbour suites (issue 22): a folder every user may write in, and
mpwatch run as another user (uid 65534) in a subprocess of its own."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

import mpwatch.cli.launch
import mpwatch.cli.listing
import mpwatch.cli.live
import mpwatch.cli.prune
import mpwatch.cli.show
import mpwatch.cli.summary
import mpwatch.rundir.claim
import mpwatch.supervisor.core
import mpwatch.supervisor.headless
from tests.faults.conftest import NOBODY, as_user, run_cli

PRELOADED = (mpwatch.cli.launch, mpwatch.cli.listing, mpwatch.cli.live, mpwatch.cli.prune, mpwatch.cli.show,
             mpwatch.cli.summary, mpwatch.rundir.claim, mpwatch.supervisor.core, mpwatch.supervisor.headless)

# Becoming another user needs root: as a user, `make test` runs these as root through a passwordless
# sudo, or they skip saying why (tests/privilege.py).
needs_root = pytest.mark.root("becoming uid 65534")


@contextmanager
def shared_folder(mode: int = 0o1777) -> Iterator[Path]:
    """A folder in the system temp folder that every user may enter (and, by default, write
    in: sticky, as /tmp is), removed after."""
    d = Path(tempfile.mkdtemp(prefix="mpwatch-hostile-"))
    d.chmod(mode)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def nobody_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for uid 65534: its own runtime directory under home (which it owns)."""
    xdg = home / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, NOBODY, NOBODY)
    os.chown(xdg, NOBODY, NOBODY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPWATCH_")}
    env.update({"XDG_RUNTIME_DIR": str(xdg), "HOME": str(home), "MPWATCH_TMPDIR": str(home), **extra})
    return env


def as_nobody(*args: object, cwd: Path, env: dict[str, str]) -> SimpleNamespace:
    """`mpwatch ARGS` as uid 65534 (no groups): in a forked child that dropped to it, so it
    needs to read nothing new (this interpreter may live where that user cannot go). Every
    module the command loads must be imported here first (PRELOADED). Its returncode, stdout
    and stderr, as subprocess.run gives them."""
    def run() -> dict[str, object]:
        os.chdir(cwd)
        return run_cli(list(args))
    res = as_user(run, env=env)
    return SimpleNamespace(returncode=res["code"], stdout=res["stdout"], stderr=res["stderr"])


def no_traceback(res: SimpleNamespace) -> None:
    assert "Traceback" not in res.stderr and "Error:" not in res.stderr.replace("mpwatch: error:", ""), res.stderr
