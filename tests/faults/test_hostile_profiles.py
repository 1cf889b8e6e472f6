"""Issue 32's files written for a rank (a profile's trace by the rank's own process, py-spy's
flame graph by the supervisor) under the run directory's rules (rundir.rank_files, the writer of
a rank's files: tests/faults/test_hostile_rank_files.py has the rest): a folder that is a link,
or that others may write in, is refused; a name planted as a link is never followed nor
replaced; every file is 0600 whatever the umask, whole or absent, and bounded; the supervisor
never makes a rank's profiles folder through a link either."""
from __future__ import annotations

import gzip
import os
import stat

import pytest

from mpwatch.rundir import rank_files, writer
from mpwatch.settings import Settings


def _folder(tmp_path):
    d = tmp_path / "run" / "rank-0" / "profiles"
    d.mkdir(parents=True, mode=0o700)
    return d


def _source(folder: rank_files.RankFolder, data: bytes) -> str:
    name, fd = folder.new(".json")
    os.write(fd, data)
    os.close(fd)
    return name


def test_a_trace_is_written_whole_0600_and_a_planted_link_at_its_name_is_neither_followed_nor_replaced(
        tmp_path):
    d = _folder(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (d / "planted.json.gz").symlink_to(victim)
    old = os.umask(0o000)
    try:
        with rank_files.RankFolder(str(d / "t.json.gz")) as f:
            size = f.gzip_from(_source(f, b'{"traceEvents": []}' * 100), 1 << 20)
        with rank_files.RankFolder(str(d / "planted.json.gz")) as f, pytest.raises(FileExistsError):
            f.gzip_from(_source(f, b'{"traceEvents": []}'), 1 << 20)
    finally:
        os.umask(old)
    st = os.lstat(d / "t.json.gz")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == size
    assert gzip.decompress((d / "t.json.gz").read_bytes()) == b'{"traceEvents": []}' * 100
    assert victim.read_text() == "keep me" and os.readlink(d / "planted.json.gz") == str(victim)
    assert sorted(p.name for p in d.iterdir() if p.name.endswith(".part")) == []


def test_a_folder_that_is_a_link_or_that_others_may_write_in_is_refused(tmp_path):
    d = _folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = d.parent / "linked"
    link.symlink_to(elsewhere)
    with pytest.raises(OSError):
        rank_files.RankFolder(str(link / "t.json.gz"))
    d.chmod(0o770)
    with pytest.raises(OSError, match="other users may write in"):
        rank_files.RankFolder(str(d / "t.json.gz"))
    with pytest.raises(OSError, match="not a file's absolute path"):
        rank_files.RankFolder("relative/t.json.gz")
    assert list(elsewhere.iterdir()) == []


def test_a_trace_past_its_bound_is_not_kept(tmp_path):
    d = _folder(tmp_path)
    with rank_files.RankFolder(str(d / "t.json.gz")) as f:
        src = _source(f, os.urandom(1 << 20))  # random bytes do not shrink
        with pytest.raises(rank_files.TooBig, match=r"passed 0\.0625 MiB"):
            f.gzip_from(src, 64 << 10)
        f.remove(src)
    assert list(d.iterdir()) == []


def test_the_supervisor_never_makes_a_ranks_profiles_folder_through_a_link(tmp_path):
    store = writer.RunStore(tmp_path / "run", Settings())
    store.create()
    store.rank_paths(0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run" / "rank-0" / "profiles").symlink_to(elsewhere)
    with pytest.raises(OSError):
        store.action_dir(0, "profiles")
    assert stat.S_IMODE(os.lstat(store.action_dir(1, "profiles")).st_mode) == 0o700
    store.close()
