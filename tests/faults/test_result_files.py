"""An action's result is the file, not the rank's word (issue 39, item 7): a rank that says it
wrote a 2^61-byte trace and wrote nothing is said to have failed (no file at the path mpwatch
chose); one that wrote 1234 bytes is shown with 1234. Before, both were shown as written, of 2^61
bytes."""
from __future__ import annotations

import pytest

from tests.faults.conftest import FAULTS, reporting
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


def test_a_result_says_the_files_own_size_or_that_there_is_none(headless):
    run = headless(FAULTS / "fake_results.py", n=1)
    wait_for(lambda: reporting(run, 1), what="rank 0 reporting")
    run.ctl("profile", "0", "--steps", "1")
    failed = run.wait_event("profile_failed")[0]
    assert failed["why"].startswith("no file at rank-0/profiles/") and failed["why"].endswith(
        f" (its rank said it wrote {2 ** 61} bytes there)"), failed
    assert not run.events("profile_written")
    run.ctl("profile", "0", "--steps", "1")
    written = run.wait_event("profile_written")[0]
    assert written["bytes"] == 1234 and written["path"].startswith("rank-0/profiles/"), written
    run.ctl("stop")
    assert run.wait_exit(60) == 1
    run.assert_gone()
