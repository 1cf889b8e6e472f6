"""A rank's allocator snapshots (rank-N/memory/, rundir.layout's MEMORY): the one place such a
file is made. A snapshot is taken by the rank's own process at the moment it matters (at a CUDA
OOM, before torch raises; or when asked), so that process writes it (mpwatch.worker.cuda_memory):
the supervisor makes the folder (rundir.writer's RunStore.action_dir) and names it in the rank's
environment (protocol.ENV_MEMORY_DIR).

Hostile by default, as rundir.writer: the folder is opened without following a link and must be
a directory of this user that no one else may write in; each file is new (O_EXCL), never
through a link, 0600 whatever the umask; a file cut short by a failed write is removed. Bounded:
the caller counts its files (worker.cuda_memory: a few a process) and torch's history its
entries (--cuda-memory-history). Standard library only: the worker side loads it at its first
snapshot. Runs on the thread that takes the snapshot.
"""
from __future__ import annotations

import errno
import os
import stat
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

SUFFIX = ".pickle"  # rundir.layout's SNAPSHOT_SUFFIX (the worker side does not load layout)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def name(kind: str, pid: int, n: int, now: float | None = None) -> str:
    """oom-20260101-120000-4242-1.pickle: what it was taken for, when, by which process, its count."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{kind}-{stamp}-{pid}-{n}{SUFFIX}"


def _folder(path: str) -> int:
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(errno.EPERM, f"{path} is a link or not a directory") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise OSError(errno.EPERM, f"{path} is another user's or others may write in it")
    return fd


def write_new(folder: str, filename: str, write: Callable[[BinaryIO], object]) -> str:
    """A new file `filename` in `folder`, filled by `write`; its path. Raises OSError (nothing
    is left of a file whose write failed)."""
    if os.sep in filename or filename in ("", ".", ".."):
        raise OSError(errno.EINVAL, f"not a file name: {filename!r}")
    dfd = _folder(folder)
    try:
        f = os.fdopen(os.open(filename, NEW, 0o600, dir_fd=dfd), "wb")
        try:
            with f:
                os.fchmod(f.fileno(), 0o600)  # whatever the umask
                write(f)
        except BaseException:
            try:
                os.unlink(filename, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)
    return os.path.join(folder, filename)
