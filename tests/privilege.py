"""What the suite may do beyond this user, and what it says where it may not.

A test that needs root (to become another user, uid 65534; to give a file to that user; to make a
cgroup) is marked `root` with what it needs it for: `@pytest.mark.root("becoming uid 65534")`. As
root it runs. As a user with a passwordless sudo (a hosted CI runner), `make test` runs every such
test in a second pass, as root through sudo (tests/ci.py); the first pass skips them saying so.
Elsewhere they skip, saying why. What needs root for one command only goes through `sudo -n`
where the user is not root (a small tmpfs: tests/helpers.mount_tmpfs).

Every skip of a run, with its reason, is written to $MPWATCH_TEST_OUTCOMES (JSON) when it is set,
for tests/ci.py's list at the end, and listed at the end of the run by reason.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess

OUTCOMES_ENV = "MPWATCH_TEST_OUTCOMES"


def is_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def sudo() -> bool:
    """This user is not root and may run a command as root through sudo without a password."""
    if is_root() or shutil.which("sudo") is None:
        return False
    try:
        return subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def as_root(argv: list[str]) -> list[str]:
    """argv as root: itself where this is root, through `sudo -n` where this user has it."""
    return argv if is_root() else ["sudo", "-n", *argv]


def root_reason(what: str) -> str:
    """Why a test marked `root` skips here."""
    if sudo():
        return f"needs root ({what}): `make test` runs it next, as root through sudo"
    return f"needs root ({what}): not root here, and no passwordless sudo to run it through"


def skip_reason(report: object) -> str:
    """A skipped test's reason, as pytest's -rs says it."""
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    return str(longrepr)
