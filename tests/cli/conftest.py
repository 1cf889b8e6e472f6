"""Helpers of the post-mortem commands' tests; the runs they read are recorded once per
session by tests/recorded_runs.py (its fixtures: record, crashed, killed, hung, oom). Tests
read them (or copies they cut short), never run directories written by hand."""
from __future__ import annotations

import json

from tests.helpers import mpwatch
from tests.recorded_runs import GiB, oom_run_until  # noqa: F401 - the tests import them from here


def summary(*args, cwd=None) -> dict:
    """`mpwatch summary ... --json`, which must succeed."""
    res = mpwatch("summary", *args, "--json", cwd=cwd)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    return json.loads(res.stdout)


def summary_text(*args, cwd=None) -> str:
    res = mpwatch("summary", *args, cwd=cwd)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    return res.stdout
