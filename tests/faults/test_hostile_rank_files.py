"""Hostile by default: the one writer of a rank's own files (rundir.rank_files: a profile's trace,
py-spy's flame graph, a CUDA allocator snapshot, asked or at an OOM) never follows a planted link,
never writes over another file, never into a folder another user owns or may write in; each file
is 0600 whatever the umask, whole or absent (nothing left when its write fails or passes its
bound), and a path is only itself."""
from __future__ import annotations

import errno
import os
import stat

import pytest

from mpwatch.rundir import rank_files
from mpwatch.rundir.rank_files import RankFolder

LIMIT = 1 << 20


def folder(tmp_path, mode=0o700):
    d = tmp_path / "memory"
    d.mkdir()
    os.chmod(d, mode)
    return d


def write(path, data=b"snap", limit=LIMIT) -> int:
    with RankFolder(str(path)) as f:
        return f.write(lambda sink: sink.write(data), limit)


def test_a_file_is_new_0600_whatever_the_umask_and_never_over_another(tmp_path):
    d = folder(tmp_path)
    old = os.umask(0)
    try:
        size = write(d / "oom-1.pickle")
    finally:
        os.umask(old)
    path = d / "oom-1.pickle"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and path.read_bytes() == b"snap" and size == 4
    with pytest.raises(FileExistsError):  # a second one with its name is refused
        write(path, b"other")
    assert path.read_bytes() == b"snap" and os.listdir(d) == ["oom-1.pickle"]  # no part left either


def test_a_planted_link_at_its_name_or_as_its_folder_is_never_followed(tmp_path):
    d = folder(tmp_path)
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    (d / "oom-1.pickle").symlink_to(target)
    with pytest.raises(FileExistsError):  # neither followed nor replaced
        write(d / "oom-1.pickle")
    assert target.read_bytes() == b"keep" and os.readlink(d / "oom-1.pickle") == str(target)
    assert os.listdir(d) == ["oom-1.pickle"]
    linked = tmp_path / "linked"
    linked.symlink_to(d)
    with pytest.raises(OSError, match="is a link or not a directory"):
        write(linked / "oom-2.pickle")
    assert not (d / "oom-2.pickle").exists()


def test_a_folder_others_may_write_in_is_refused(tmp_path):
    d = folder(tmp_path, 0o777)
    with pytest.raises(OSError, match="other users may write in"):
        write(d / "oom-1.pickle")
    assert os.listdir(d) == []


@pytest.mark.root("giving a folder to uid 65534")
def test_another_users_folder_is_refused(tmp_path):
    d = folder(tmp_path)
    os.chown(d, 65534, 65534)
    with pytest.raises(OSError, match="belongs to another user"):
        write(d / "oom-1.pickle")
    assert os.listdir(d) == []


def test_a_write_that_fails_or_passes_its_bound_leaves_nothing_and_a_path_is_only_itself(tmp_path):
    d = folder(tmp_path)

    def full_disk(sink):
        sink.write(b"half")
        raise OSError(28, "No space left on device")
    with RankFolder(str(d / "oom-1.pickle")) as f, pytest.raises(OSError, match="No space left"):
        f.write(full_disk, LIMIT)
    assert os.listdir(d) == []
    with pytest.raises(rank_files.TooBig, match=r"passed 0\.0625 MiB"):
        write(d / "oom-1.pickle", b"x" * (64 << 10) + b"x", limit=64 << 10)
    assert os.listdir(d) == []
    for bad in (f"{d}/../escape.pickle", f"{d}/", f"{d}/..", f"{d}//oom.pickle", f"{d}/.hidden",
                "memory/oom.pickle"):
        with pytest.raises(OSError, match="not a file's absolute path"):
            RankFolder(bad)
    assert not (tmp_path / "escape.pickle").exists() and os.listdir(d) == []


def test_without_hard_links_the_name_is_claimed_first_and_still_never_over_another(tmp_path, monkeypatch):
    """A filesystem without hard links (link(2) says EPERM): the name is taken new (O_EXCL), then
    replaced by the whole file; a file or link already there is still refused."""
    def no_link(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(rank_files.os, "link", no_link)
    d = folder(tmp_path)
    assert write(d / "a.pickle", b"whole") == 5
    assert (d / "a.pickle").read_bytes() == b"whole" and os.listdir(d) == ["a.pickle"]
    (d / "b.pickle").symlink_to(tmp_path / "victim")
    with pytest.raises(FileExistsError):
        write(d / "b.pickle")
    assert not (tmp_path / "victim").exists() and sorted(os.listdir(d)) == ["a.pickle", "b.pickle"]
