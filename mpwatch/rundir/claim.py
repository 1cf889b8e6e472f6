"""A run's claim on its id and its directory, taken atomically by the process that starts the
run (the CLI; the supervisor itself when started without one), so that runs started in the
same second (a sweep's `for lr in ...; do mpwatch ... & done`) never share a directory, a
registry entry or a socket.

An id is `<time>-<script>-<suffix>` (rundir.registry.new_run_id: the suffix is random, so
nobody can plant a run's directory before it starts). Claiming takes the id's registry entry
with O_EXCL and makes its directory fresh (rundir.writer: a `mkdir` that fails when anything
is there); when either is taken, the next id is tried. The claim holds the directory open:
rundir.writer.RunStore writes every file relative to it. Runs on the caller's thread.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from mpwatch.rundir import layout, registry, writer

TRIES = 50  # ids tried before giving up (each collision is another run's, or a planted name)


@dataclass
class Claim:
    run_id: str
    run_dir: Path  # absolute
    fd: int  # the run directory, open: handed to writer.RunStore.create
    tmpdir: Path  # the registry's (settings.Settings.tmpdir)

    def release(self) -> None:
        """Give the claim up (the run never started): the registry entry goes, the directory stays."""
        registry.unregister(self.run_id, self.tmpdir)
        try:
            os.close(self.fd)
        except OSError:
            pass


def claim(script: str, nprocs: int, cwd: str, tmpdir: Path, run_dir: Path | str | None = None,
          run_id: str | None = None, folder: Path | str | None = None) -> Claim:
    """Claim a new run: run_dir as given (an existing one only if empty: writer.open_run_dir),
    else `<folder>/<id>` (folder: torchrun's --log-dir; default <cwd>/mpwatch-runs). run_id:
    the id to take (a launcher's choice), else a new one each try. tmpdir: the registry's
    (settings.Settings.tmpdir). Raises registry.RunError with the one line the user sees."""
    started = time.time()
    registry.live_runs(tmpdir)  # stale entries (a stale one of the same id too) and stale sockets are removed
    for _ in range(TRIES):
        rid = run_id or registry.new_run_id(script)
        d = Path(run_dir) if run_dir is not None else Path(folder or Path(cwd) / layout.RUNS_FOLDER) / rid
        d = Path(cwd, d) if not d.is_absolute() else d
        entry = registry.RegistryEntry(run_id=rid, run_dir=str(d), pid=os.getpid(), script=script,
                                       started=started, nprocs=nprocs)
        if not registry.reserve(rid, entry, tmpdir):
            if run_id is not None:
                raise registry.RunError(f"run id {run_id} is taken by a live run")
            continue
        try:
            # the default runs folder must be this user's own (rundir.runs_folder)
            fd = writer.open_run_dir(d) if run_dir is not None else writer.make_run_dir(d, folder is None)
        except FileExistsError:  # a name planted, or made by another run: the next id
            registry.unregister(rid, tmpdir)
            if run_id is not None:
                raise registry.RunError(f"cannot create run directory {d}: it exists") from None
            continue
        except OSError as exc:
            registry.unregister(rid, tmpdir)
            raise registry.RunError(f"cannot create run directory {d}: {exc.strerror or exc}") from None
        return Claim(rid, d, fd, tmpdir)
    raise registry.RunError(f"no free run id after {TRIES} tries (is someone making names in "
                            f"{folder or layout.RUNS_FOLDER}?)")
