"""What a rank's own process writes into its folder of the run directory: a profile's trace
(mpwatch.worker.profile), and the next actions' files (contract.actions); and what the
supervisor has a tool write there for a rank (py-spy's flame graph: supervisor.control.flame).
The supervisor makes the folder (rundir.writer's RunStore.action_dir) and names the file; the
file is written under the writer's rules, in this module only:

- the folder is opened without following a link and must be a directory of this user that
  nobody else may write in; every name below is relative to that open folder, so the folder
  cannot be swapped for another between the check and the writes;
- every file is made there new (O_EXCL, 0600 whatever the umask, never through a link), under a
  hidden temporary name, and renamed to its name once whole: a reader sees no file or all of it;
- what is read back (a library's own output) must be a regular file, and what is written is
  bounded (`limit`): past it the file is not kept and the caller hears why.

Stdlib only; loaded when an action writes (never at `import mpwatch`); any thread, one folder
per thread.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FILE_MODE = 0o600
CHUNK = 1 << 20
GZIP_LEVEL = 1  # the fastest: a trace is JSON and shrinks ~10x at any level; the loop runs meanwhile


class TooBig(OSError):
    """What was written passed its bound; nothing is kept."""


def refused(why: str) -> OSError:
    return OSError(errno.EPERM, why)


class RankFolder:
    """A rank's folder for an action's file (`final`: the file's path the supervisor chose)."""

    def __init__(self, final: str):
        folder, self.name = os.path.split(final)
        if not os.path.isabs(final) or not self.name or self.name.startswith("."):
            raise refused(f"not a file's absolute path: {final[:200]!r}")
        self.path = folder
        self.fd = os.open(folder, DIR_FLAGS)
        try:
            st = os.fstat(self.fd)
            if st.st_uid != os.getuid():
                raise refused(f"{folder} belongs to another user (uid {st.st_uid})")
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise refused(f"other users may write in {folder}")
        except OSError:
            os.close(self.fd)
            raise

    def __enter__(self) -> RankFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def new(self, suffix: str) -> tuple[str, int]:
        """A new, empty, hidden file of this folder: its name and an fd open to write it."""
        name = f".{self.name}.{secrets.token_hex(6)}{suffix}"
        fd = os.open(name, NEW, FILE_MODE, dir_fd=self.fd)
        os.fchmod(fd, FILE_MODE)  # whatever the umask
        return name, fd

    def scratch(self, suffix: str) -> tuple[str, str]:
        """A new, empty, hidden file for a library that writes by path (torch's trace export):
        its name and a path that reaches it through this open folder (/proc/self/fd)."""
        name, fd = self.new(suffix)
        os.close(fd)
        return name, f"/proc/self/fd/{self.fd}/{name}"

    def remove(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def gzip_from(self, src: str, limit: int) -> int:
        """The file `src` of this folder gzipped into the final file, whole or not at all: its
        size. TooBig when the gzip passes `limit` bytes; OSError as the disk says."""
        part, out = self.new(".part")
        try:
            with os.fdopen(out, "wb") as f:
                _gzip(self._open_regular(src), f, limit)
                f.flush()
                os.fsync(f.fileno())
                size = f.tell()
            self.publish(part)
            return size
        except BaseException:
            self.remove(part)
            raise

    def publish(self, part: str) -> None:
        """The file `part` of this folder, whole, given its name."""
        os.replace(part, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def head(self, name: str, n: int) -> bytes:
        """The first `n` bytes of a regular file of this folder."""
        with os.fdopen(self._open_regular(name), "rb") as f:
            return f.read(n)

    def _open_regular(self, name: str) -> int:
        fd = os.open(name, READ, dir_fd=self.fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise refused(f"{name} is not a regular file")
        os.set_blocking(fd, True)
        return fd


def _gzip(src: int, out: BinaryIO, limit: int) -> None:
    """Stream src (an fd, closed here) into `out` as one gzip member, at most `limit` bytes.
    zlib works without the GIL, so the training thread runs meanwhile."""
    comp = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    written = 0
    write = out.write
    with os.fdopen(src, "rb") as f:
        while chunk := f.read(CHUNK):
            data = comp.compress(chunk)
            written += len(data)
            if written > limit:
                raise TooBig(errno.EFBIG, f"the trace passed {limit / (1 << 20):g} MiB gzipped")
            write(data)
    write(comp.flush())
