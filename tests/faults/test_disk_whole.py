"""Whole or nothing on a full disk (issue 39, item 4). A profile whose trace does not fit leaves
no temporary behind (Kineto's own, as big as the trace, was left: 20 MB on a full disk) and is
said failed, not written empty; the run still ends with final.json (the room kept for it from the
start: rundir.writer's reserve). Where even that cannot be, the run says "disk full".
A small tmpfs is the full disk (root; skipped where it cannot be mounted)."""
from __future__ import annotations

import errno
import os
import shutil

import pytest

from tests.faults.conftest import FAULTS, final
from tests.helpers import mount_tmpfs, need, umount, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


@pytest.fixture
def disk(tmp_path):
    path = tmp_path / "disk"
    why = mount_tmpfs(path, "24m")
    if why:
        pytest.skip(why)
    yield path
    umount(path)


def fill(path, leave: int) -> None:
    """Fill the file system of `path` but for `leave` bytes."""
    with open(path / "FILL", "wb", buffering=0) as f:
        while shutil.disk_usage(path).free > leave:
            try:
                f.write(b"\0" * min(1 << 20, max(4096, shutil.disk_usage(path).free - leave)))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return


def test_a_profile_on_a_full_disk_leaves_no_temporary_and_the_run_ends_with_final_json(headless, disk):
    need("torch")
    run = headless(FAULTS / "many_ops.py", n=1, start=False)
    run.run_dir = disk / "run"
    try:
        run.start()
        wait_for(lambda: (run.worker(0)["step"] or 0) >= 3, 120, what="rank 0 stepping")
        fill(disk, 3 << 20)  # room for the run's files, not for a 10 MB trace
        run.ctl("profile", "0", "--steps", "5")
        failed = run.wait_event("profile_failed", timeout=120)[0]
        assert failed["why"] == "the trace was not written: Kineto wrote no whole trace (is the disk full?)", failed
        assert not run.events("profile_written")
        profiles = run.run_dir / "rank-0" / "profiles"
        assert os.listdir(profiles) == [], os.listdir(profiles)  # no temporary, no empty trace
        run.ctl("stop")
        assert run.wait_exit(60) == 1
        assert final(run)["workers"][0]["state"] == "killed"
        assert not (run.run_dir / ".final-reserve").exists()
        run.assert_gone()
    finally:
        run.cleanup()


def test_a_disk_full_from_the_start_ends_in_words_where_final_json_cannot_be(headless, disk):
    fill(disk, 96 << 10)  # the run's directory and first files fit; its reserve does not
    run = headless(FAULTS / "diskfill.py", str(disk), n=1, start=False)
    run.run_dir = disk / "run"
    try:
        run.start()
        wait_for(lambda: (run.worker(0)["step"] or 0) >= 3, 60, what="rank 0 stepping")
        run.ctl("stop")
        assert run.wait_exit(60) == 1
        assert not (run.run_dir / "final.json").exists()
        assert "alert: disk full: final.json could not be written (cannot write the run directory" in \
            run.stderr_text, run.stderr_text
        run.assert_gone()
    finally:
        run.cleanup()
