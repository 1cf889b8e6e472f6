"""Issue 39, item 3: a phase named with a lone surrogate (a non-UTF-8 byte as Python decodes
it) made `/metrics` answer 500 for the rest of the run, in both formats: the pace families
skipped the label escaping every other family has. On a real run, scraped: the page answers in
both formats at every scrape, every label value is escaped by the one path (a quote and a
backslash in a phase's name), and prometheus_client's own parsers read the names back; nothing
is logged as a bug (the suite's strict fixture). The supervisor now also keeps only printable
phase names (supervisor.workers.batch_check: the lone surrogate's phase is left out, and said);
the page's own escaping of any name is tested on statuses in test_records_total.py."""
from __future__ import annotations

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from tests.faults.conftest import FAULTS
from tests.helpers import wait_for
from tests.supervisor.test_metrics import free_port, get, samples

pytestmark = pytest.mark.timeout(240)
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
PHASES = {'say "hi" \\ there', "compute", "other"}  # read back ("other": the rest of a step)


def phases_scraped(port: int) -> set[str] | None:
    code, text = get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200, text
    got = {s.labels["phase"] for s in samples(text).get("mpwatch_worker_phase_seconds", [])}
    return got if got == PHASES else None


def test_a_phase_named_with_a_lone_surrogate_is_scraped_in_both_formats(headless):
    port = free_port()
    run = headless(FAULTS / "surrogate_phase.py", n=1, opts=["--metrics-port", port])
    wait_for(lambda: phases_scraped(port), 60, what="the three phases on the metrics page")
    for _ in range(3):  # and it stays so: every scrape of the run
        assert phases_scraped(port) == PHASES
        code, om = get(f"http://127.0.0.1:{port}/metrics", accept=OPENMETRICS)
        assert code == 200 and om.endswith("# EOF\n"), om[-300:]
        fams = {f.name: f for f in openmetrics_families(om)}
        assert {s.labels["phase"] for s in fams["mpwatch_worker_phase_seconds"].samples} == PHASES
        assert fams["mpwatch_worker_step"].samples[0].value >= 1
    assert "Traceback" not in run.stderr_text
    run.ctl("stop")
    assert run.wait_exit(60) == 1
