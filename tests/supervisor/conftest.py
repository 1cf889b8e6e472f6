"""The supervisor's tests run it strict: a worker state change its table does not allow
raises there (MPWATCH_STRICT_STATES: settings, supervisor.workers.states), and a run whose events hold an
`internal` alert fails the test that made it, whichever thread hit the bug."""
import json

import pytest


@pytest.fixture(autouse=True)
def strict_states(monkeypatch, tmp_path):
    monkeypatch.setenv("MPWATCH_STRICT_STATES", "1")
    yield
    internal = []
    for path in tmp_path.rglob("events.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "alert" and rec.get("kind") == "internal":
                internal.append(rec["message"])
    assert not internal, f"the supervisor recorded internal errors: {internal}"
