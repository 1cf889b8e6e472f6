import pytest

from tests.helpers import HeadlessRun
from tests.libnvml import libnvml, libnvml_no_v3  # noqa: F401 - session fixtures, built once
from tests.recorded_runs import crashed, hung, killed, oom, record, stored_hang  # noqa: F401 - session fixtures, recorded once


@pytest.fixture
def headless(tmp_path):
    """Factory: headless(script, *args, n=2, opts=[...]) -> a started HeadlessRun, cleaned up after."""
    runs = []

    def make(script, *args, n=2, opts=(), env=None, start=True):
        run = HeadlessRun(tmp_path / f"r{len(runs)}", script, *args, n=n, opts=opts, env=env)
        run.tmp.mkdir(parents=True, exist_ok=True)
        runs.append(run)
        return run.start() if start else run

    yield make
    for run in runs:
        run.cleanup()
