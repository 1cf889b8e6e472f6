"""The folder a run directory is made in (./mpwatch-runs by default, torchrun's --log-dir, the
parent of a --run-dir): made with explicit modes, opened, and checked before a run directory is
made inside it by its fd (rundir.writer.make_run_dir), and checked before prune removes runs
from it. The default folder is a name anyone may have made first in a shared folder (a link to
another user's folder, a folder of theirs): it must be a real folder of this user's that no one
else may write in. Runs on the caller's thread.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def refused(why: str) -> OSError:
    """An OSError whose strerror says why a path is not used (callers print strerror)."""
    return OSError(errno.EPERM, why)


def check_runs_folder(folder: Path, st: os.stat_result, own: bool) -> None:
    """The folder a run directory is made in (st: its stat). `own` (the default runs folder,
    ./mpwatch-runs, which anyone may have made first in a shared folder): this user's, and no
    one else may write in it. Otherwise (a --log-dir or --run-dir's parent, named by the user):
    this user's or root's, and sticky when every user may write in it (else another user could
    rename the run away). Raises OSError, its strerror the one line the user sees."""
    if own and st.st_uid != os.getuid():
        raise refused(f"{folder} belongs to another user (uid {st.st_uid})")
    if st.st_uid not in (os.getuid(), 0):
        raise refused(f"{folder} belongs to another user (uid {st.st_uid})")
    if own and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise refused(f"other users may write in {folder} (chmod go-w it, or remove it)")
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise refused(f"every user may write in {folder} and it is not sticky")


def check_own_runs_folder(folder: Path) -> None:
    """The default runs folder as a reader that removes runs takes it (prune): a real folder
    (never a link), this user's, that no one else may write in. Raises OSError."""
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        raise refused(f"{folder} is a link (never followed)")
    if not stat.S_ISDIR(st.st_mode):
        raise refused(f"{folder} is not a folder")
    check_runs_folder(folder, st, own=True)


def _make_folders(folder: Path) -> None:
    """folder and any missing folder above it, each 0755 whatever the umask (under umask 000 a
    plain mkdir makes it 0777: every user's to write in). One already there stays as it is."""
    missing = []
    for d in (folder, *folder.parents):
        if os.path.lexists(d):
            break
        missing.append(d)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o755)  # a umask only takes bits away: never group- or world-writable
        except FileExistsError:
            pass  # made meanwhile (another run): checked when opened


def open_runs_folder(folder: Path, own: bool) -> int:
    """The folder a run directory is made in, open (made when missing, see _make_folders) and
    checked (check_runs_folder). `own`, the default runs folder, is never a link. Raises OSError."""
    _make_folders(folder)
    try:
        fd = os.open(folder, DIR_FLAGS if own else DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise refused(f"{folder} is a link (never followed) or not a folder") from None
        raise
    try:
        check_runs_folder(folder, os.fstat(fd), own)
    except OSError:
        os.close(fd)
        raise
    return fd
