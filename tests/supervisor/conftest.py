"""The supervisor's tests run it strict: a worker state change its table does not allow
raises there (MPWATCH_STRICT_STATES: settings, supervisor.workers.states), and a run whose events hold an
`internal` alert, or whose supervisor.log holds a bug's traceback (supervisor.errors), fails the
test that made it, whichever thread hit the bug."""
import json

import pytest

from mpwatch.supervisor import errors


@pytest.fixture(autouse=True)
def strict_states(monkeypatch, tmp_path, request):
    monkeypatch.setenv("MPWATCH_STRICT_STATES", "1")
    yield
    internal = []
    for path in tmp_path.rglob("events.jsonl"):
        if not path.is_file() or path.is_symlink():  # a FIFO or a link a hostile test left: never read
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "alert" and rec.get("kind") == "internal":
                internal.append(rec["message"])
    assert not internal, f"the supervisor recorded internal errors: {internal}"
    if request.node.get_closest_marker("injects_bugs") is None:
        bugs = [line for path in tmp_path.rglob(errors.FILE_NAME) if path.is_file() and not path.is_symlink()
                for line in path.read_text(errors="replace").splitlines() if " ERROR [" in line]
        assert not bugs, f"the supervisor logged bugs (see its supervisor.log): {bugs}"
