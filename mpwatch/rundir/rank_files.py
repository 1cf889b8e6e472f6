"""The one writer of a rank's own files in the run directory: what its process writes into its
folder (a profile's trace: mpwatch.worker.profile; a CUDA allocator snapshot, asked or at an
OOM: mpwatch.worker.cuda_memory) and what the supervisor has a tool write there for a rank
(py-spy's flame graph: supervisor.live.flame). The supervisor makes the folder
(rundir.writer's RunStore.action_dir) and names an asked file; a rank's process names the
snapshots it takes itself (`own_name`). Every such file is written under these rules, in this
module only:

- the folder is opened without following a link and must be a directory of this user that
  nobody else may write in; every name below is relative to that open folder, so the folder
  cannot be swapped for another between the check and the writes;
- a file's name is a plain name, never hidden (a hidden name is a file being written);
- every file is made new (O_EXCL, 0600 whatever the umask, never through a link) under a hidden
  temporary name and given its name once whole, never over another file nor through a link
  planted at that name (a hard link, which fails when the name is taken): a reader sees no
  file or all of it, and a write that fails leaves nothing;
- what is read back (a library's own output) must be a regular file, and what is written is
  bounded (`limit`): past it the file is not kept and the caller hears why (TooBig).

Stdlib only; loaded when a file is written (never at `import mpwatch`); any thread, one folder
per thread.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
import time
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FILE_MODE = 0o600
CHUNK = 1 << 20
GZIP_LEVEL = 1  # the fastest: a trace is JSON and shrinks ~10x at any level; the loop runs meanwhile
PART = ".part"  # rundir.layout's PART_SUFFIX (the worker side does not load layout)
NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK)  # a filesystem without them


class TooBig(OSError):
    """What was written passed its bound; nothing is kept."""


def refused(why: str) -> OSError:
    return OSError(errno.EPERM, why)


def own_name(kind: str, pid: int, n: int, suffix: str, now: float | None = None) -> str:
    """A name a rank's process gives a file it takes itself, e.g. oom-20260101-120000-4242-1.pickle:
    what it was taken for, when, by which process, its count there."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{kind}-{stamp}-{pid}-{n}{suffix}"


class RankFolder:
    """A rank's folder, open to write one file (`final`: its absolute path, the supervisor's
    name or the rank's `own_name`)."""

    def __init__(self, final: str):
        folder, self.name = os.path.split(final)
        if not os.path.isabs(final) or os.path.normpath(final) != final or self.name.startswith("."):
            # a path is only itself (no "..", no "//"); a name is a name, never hidden nor empty
            raise refused(f"not a file's absolute path: {final[:200]!r}")
        self.path = folder
        try:
            self.fd = os.open(folder, DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise refused(f"{folder} is a link or not a directory") from None
            raise
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

    def write(self, fill: Callable[[Sink], object], limit: int) -> int:
        """The file, filled by `fill` (a pickle's dump), whole or not at all: its size. TooBig
        past `limit` bytes; FileExistsError when its name is taken; OSError as the disk says."""
        return self._whole(lambda f: fill(Sink(f, limit)))

    def gzip_from(self, src: str, limit: int) -> int:
        """The file `src` of this folder gzipped into the final file, whole or not at all: its
        size. TooBig when the gzip passes `limit` bytes; OSError as the disk says."""
        return self._whole(lambda f: _gzip(self._open_regular(src), f, limit))

    def _whole(self, fill: Callable[[BinaryIO], object]) -> int:
        """A hidden part filled by `fill`, on disk, then published under the file's name; gone on error."""
        part, fd = self.new(PART)
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
                size = f.tell()
        except BaseException:
            self.remove(part)
            raise
        self.publish(part)
        return size

    def publish(self, part: str) -> None:
        """The file `part` of this folder, whole, given its name; never over another file or a
        link at that name (FileExistsError). The hidden name goes, published or not."""
        try:
            try:
                os.link(part, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in NO_HARD_LINKS:
                    raise
                self._claim_then_replace(part)
        finally:
            self.remove(part)

    def _claim_then_replace(self, part: str) -> None:
        """Where the filesystem has no hard links: the name is taken first as a new empty file
        of ours (O_EXCL: never over another, never through a link), then replaced by the whole one."""
        os.close(os.open(self.name, NEW, FILE_MODE, dir_fd=self.fd))
        try:
            os.replace(part, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.remove(self.name)
            raise

    def size(self, name: str) -> int | None:
        """The size of a file of this folder (None: there is none at that name)."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            return None

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


class Sink:
    """What `RankFolder.write` fills: a file that takes at most `limit` bytes, past them TooBig
    (a library writes into it by calls to write(): pickle.dump)."""

    def __init__(self, f: BinaryIO, limit: int):
        self.f = f
        self.left = limit
        self.limit = limit

    def write(self, data: bytes | memoryview) -> int:
        self.left -= memoryview(data).nbytes
        if self.left < 0:
            raise TooBig(errno.EFBIG, f"the file passed {self.limit / (1 << 20):g} MiB")
        return self.f.write(data)


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
