"""Issue 31, item 7: Prometheus listed the GPU alert kinds at 0 but the run's own (hang, disk,
...) only while one was active, so a dashboard's query for `kind="hang"` found nothing on a
healthy run. One rule: every alert kind, GPU's and run's, always listed, 0 when inactive. Fed
statuses recorded from real runs (gpu2: GPU alerts, no run alert; paused: a hang). Fails on the
code before (no hang, disk, ... sample on gpu2)."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from mpwatch.contract import ALERT_KINDS, RUN_ALERT_KINDS
from mpwatch.supervisor.metrics import collector
from tests.tui.recorded import status


def alerts(name: str) -> dict[str, float]:
    text = collector.text(collector.families(status(name), "host")).decode()
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "mpwatch_alerts")
    return {s.labels["kind"]: s.value for s in fam.samples}


def test_every_alert_kind_is_listed_at_0_when_inactive():
    got = alerts("gpu2")
    assert set(got) == ALERT_KINDS | RUN_ALERT_KINDS
    assert {"hang", "disk", "unkillable"} <= RUN_ALERT_KINDS
    assert all(got[k] == 0 for k in RUN_ALERT_KINDS)  # a healthy run: none of its own
    assert got["contention"] >= 1  # the GPU alerts it has


def test_an_active_run_alert_counts():
    got = alerts("paused")
    assert got["hang"] == 1 and got["disk"] == 0 and set(got) == ALERT_KINDS | RUN_ALERT_KINDS
