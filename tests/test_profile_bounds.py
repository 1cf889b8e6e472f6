"""docs/profiles.md's bounds of a profile, on the worker's own runner (worker.profile's Session):
one still running after 5 minutes stops at its next step; a gzipped trace is kept up to 512 MiB
(rundir.rank_files refuses the byte past the bound it is given: tests/faults/test_hostile_profiles.py).
The profiler and the files are the test's stand-ins: what is checked is the runner's rule."""

from __future__ import annotations

import os
import time

from mpwatch.worker import profile
from tests.documented import PROFILE_TRACE_MAX, PROFILE_WALL_S


class Answers:
    rank = 0

    def __init__(self) -> None:
        self.results: list[tuple[int, dict]] = []

    def result(self, rid: int, fields: dict) -> None:
        self.results.append((rid, fields))


class Profiler:
    """torch.profiler's calls the runner makes, answered as a profiler of no operators would."""

    def stop(self) -> None:
        pass

    def export_chrome_trace(self, path: str) -> None:
        with open(path, "w") as f:
            f.write('{"traceEvents": []}')

    def key_averages(self) -> list:
        return []


class Folder:
    """A rank's profiles folder, the bound it is given written down."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.limits: list[int] = []

    def scratch(self, suffix: str) -> tuple[str, str]:
        path = str(self.tmp / f"scratch{suffix}")
        open(path, "w").close()
        return path, path

    def size(self, path: str) -> int | None:
        return os.path.getsize(path) if os.path.isfile(path) else None

    def gzip_from(self, src: str, limit: int) -> int:
        self.limits.append(limit)
        return 42

    def remove(self, name: str) -> None:
        pass

    def close(self) -> None:
        pass


def _session(tmp_path, step: int = 10, steps: int = 50) -> profile.Session:
    return profile.Session(Answers(), 7, Profiler(), Folder(tmp_path), step, steps, cuda=False, held=0.0)


def test_a_profile_stops_at_its_next_step_past_the_documented_time(tmp_path, monkeypatch):
    s = _session(tmp_path)
    stopped: list[tuple[int | None, str | None]] = []
    monkeypatch.setattr(s, "_stop", lambda steps, note, wait: stopped.append((steps, note)))
    s.started = time.monotonic() - (PROFILE_WALL_S - 1.0)
    assert s.at_step(11) is False and not stopped  # just short of it: it goes on
    s.started = time.monotonic() - (PROFILE_WALL_S + 0.01)
    assert s.at_step(12) is True  # just past it: it stops at this step, cut short, with the steps it holds
    assert stopped == [(2, f"cut at {PROFILE_WALL_S:g} s")]


def test_a_trace_past_the_documented_size_is_not_kept(tmp_path):
    s = _session(tmp_path)
    s._export(5, None)
    assert s.folder.limits == [PROFILE_TRACE_MAX]
    [(rid, fields)] = s.answers.results
    assert rid == 7 and fields["state"] == "written" and fields["bytes"] == 42
