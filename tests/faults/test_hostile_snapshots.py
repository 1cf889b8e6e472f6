"""Issue 33, hostile by default: a rank's allocator snapshots (rundir.snapshots, written by the rank's
own process into rank-N/memory/) never follow a planted link, never write into a folder another
user owns or may write in, are 0600 whatever the umask, and leave nothing when their write fails."""
from __future__ import annotations

import os
import stat

import pytest

from mpwatch.rundir import snapshots


def folder(tmp_path, mode=0o700):
    d = tmp_path / "memory"
    d.mkdir()
    os.chmod(d, mode)
    return d


def test_a_snapshot_is_a_new_0600_file_whatever_the_umask(tmp_path):
    d = folder(tmp_path)
    old = os.umask(0)
    try:
        path = snapshots.write_new(str(d), "oom-1.pickle", lambda f: f.write(b"snap"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and open(path, "rb").read() == b"snap"
    with pytest.raises(FileExistsError):  # never over another file: a second one with its name is refused
        snapshots.write_new(str(d), "oom-1.pickle", lambda f: f.write(b"other"))
    assert open(path, "rb").read() == b"snap"


def test_a_planted_link_at_its_name_or_as_its_folder_is_never_followed(tmp_path):
    d = folder(tmp_path)
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    (d / "oom-1.pickle").symlink_to(target)
    with pytest.raises(FileExistsError):
        snapshots.write_new(str(d), "oom-1.pickle", lambda f: f.write(b"snap"))
    assert target.read_bytes() == b"keep"
    linked = tmp_path / "linked"
    linked.symlink_to(d)
    with pytest.raises(OSError, match="is a link or not a directory"):
        snapshots.write_new(str(linked), "oom-2.pickle", lambda f: f.write(b"snap"))
    assert not (d / "oom-2.pickle").exists()


def test_a_folder_others_may_write_in_or_another_users_is_refused(tmp_path):
    d = folder(tmp_path, 0o777)
    with pytest.raises(OSError, match="others may write in it"):
        snapshots.write_new(str(d), "oom-1.pickle", lambda f: f.write(b"snap"))
    assert os.listdir(d) == []
    if os.getuid() == 0:  # as root: a folder of nobody's (uid 65534) is another user's
        os.chmod(d, 0o700)
        os.chown(d, 65534, 65534)
        with pytest.raises(OSError, match="another user's"):
            snapshots.write_new(str(d), "oom-1.pickle", lambda f: f.write(b"snap"))
        assert os.listdir(d) == []


def test_a_write_that_fails_leaves_no_file_and_a_name_is_only_a_name(tmp_path):
    d = folder(tmp_path)

    def full_disk(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space left"):
        snapshots.write_new(str(d), "oom-1.pickle", full_disk)
    assert os.listdir(d) == []
    for bad in ("../escape.pickle", "", ".."):
        with pytest.raises(OSError, match="not a file name"):
            snapshots.write_new(str(d), bad, lambda f: f.write(b"snap"))
    assert not (tmp_path / "escape.pickle").exists()
