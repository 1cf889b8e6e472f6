"""`make test`'s pytest, the same everywhere: every test, then the ones that need root.

    .venv/bin/python -m tests.ci [PYTEST ARGS...]     # what `make test` runs (-q -rs -n 4 ...)

Run as root, one pytest runs every test. Run as a user with a passwordless sudo (a hosted CI runner),
the tests marked `root` (tests/privilege.py: another user, a cgroup) skip in that pass and run next,
as root through `sudo -n`, in a second one (its bytecode and pytest's cache not written: the
checkout stays this user's). Run as a user without one, they skip, saying so. Either way the run ends
with the tests that did not run, each with its reason, and its exit status is the worse of the two.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import privilege

ROOT = Path(__file__).resolve().parent.parent


def _pytest(args: list[str], outcomes: Path, as_root: bool = False) -> tuple[int, dict[str, list]]:
    env = {**os.environ, privilege.OUTCOMES_ENV: str(outcomes)}
    argv = [sys.executable, "-m", "pytest", *args]
    if as_root:  # sudo keeps no environment: what the tests need of this one, said
        keep = {k: env[k] for k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", privilege.OUTCOMES_ENV)
                if k in env}
        argv = ["sudo", "-n", "env", *(f"{k}={v}" for k, v in keep.items()), "PYTHONDONTWRITEBYTECODE=1",
                *argv, "-p", "no:cacheprovider", "-m", "root"]
    code = subprocess.call(argv, cwd=ROOT, env=env)
    try:
        return code, json.loads(outcomes.read_text())
    except (OSError, ValueError):
        return code, {}


def skipped(outcomes: dict[str, list]) -> dict[str, str]:
    return {nodeid: str(why) for nodeid, (outcome, why) in outcomes.items() if outcome == "skipped"}


def main(args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="mpwatch-ci-") as tmp:
        os.chmod(tmp, 0o755)
        code, outcomes = _pytest(args, Path(tmp) / "user.json")
        needs_root = [n for n, why in skipped(outcomes).items() if why.startswith("needs root (")]
        as_root = ""
        if needs_root and privilege.sudo():
            print(f"\n=== the {len(needs_root)} tests that need root, as root through sudo ===", flush=True)
            second, more = _pytest(args, Path(tmp) / "root.json", as_root=True)
            code = max(code, second)
            outcomes.update(more)
            as_root = f"; {len(more)} of them run as root through sudo"
    left = skipped(outcomes)
    print(f"\n=== {len(left)} tests did not run{as_root}: each, with why ===")
    for nodeid, why in sorted(left.items(), key=lambda kv: (kv[1], kv[0])):
        print(f"SKIPPED {nodeid}: {why}")
    failed = sorted(n for n, (outcome, _) in outcomes.items() if outcome == "failed")
    print(f"=== {len(outcomes) - len(left) - len(failed)} passed, {len(failed)} failed, {len(left)} skipped "
          f"(exit status {code}) ===")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
