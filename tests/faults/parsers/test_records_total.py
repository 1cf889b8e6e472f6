"""Property tests (issue 39): the readers of a run's records (a profile's result and its top
operators, the control events folded into requests, events.jsonl's lines read unparsed by the
replay and the thinning pass, a reply's parts) and the metrics page built from a status whose
names a worker chose: a value or a refusal for any input, bounded, never an exception."""
from __future__ import annotations

import copy
import json

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from mpwatch.contract import actions, as_number
from mpwatch.rundir import eventlines, live_events, thinning
from mpwatch.sources.local import Requests
from mpwatch.sources.replay import reports
from mpwatch.supervisor.metrics import collector
from mpwatch.text import profile_text
from tests.faults.parsers.hostile import HUGE, budget, json_values, texts
from tests.tui.recorded import recording

CONTROL = sorted(live_events.LIVE_EVENTS)
ids = st.integers(-2, 3) | json_values
ranks_lists = st.lists(st.integers(-3, 6), max_size=8) | st.sampled_from([list(range(5000)), [10 ** 30, -1]]) \
    | json_values
control_event = st.fixed_dictionaries(
    {"ts": st.floats(0, 1e10), "event": st.sampled_from(CONTROL), "rank": st.none() | st.integers(-1, 6)},
    optional={"id": ids, "ranks": ranks_lists, "step": json_values, "steps": json_values, "by": json_values,
              "tunable": st.sampled_from(["lr", "bs"]) | json_values, "type": st.sampled_from(["int", "float", "str"]),
              "value": json_values, "old": json_values, "late": json_values, "path": json_values,
              "bytes": json_values, "why": json_values, "top": json_values, "held_ms": json_values,
              "tool": json_values, "state": json_values})


@budget(80)
@given(st.lists(control_event, max_size=25))
def test_live_events_of_any_shape_fold_and_are_worded(extra):
    """The recorded profiles' events, then any control events: the fold's status is worded by
    summary's, the TUI's and ctl status's texts."""
    live = live_events.LiveFold()
    for e in recording("profile")["events"] + extra:
        if e["event"] in live_events.LIVE_EVENTS:
            live_events.apply(live, copy.deepcopy(e))
    view = live.status()
    for req in view.profiles:
        assert len(req["ranks"]) <= live_events.RANKS_MAX
        profile_text.request_text(req)
        profile_text.outcome_text(req)
        for rank in req["ranks"][:4]:
            profile_text.state_text(req, rank, 10)
            profile_text.top_lines(profile_text.result(req, rank), 5)
    json.dumps(view.tunables), json.dumps(view.checkpoints)


@budget(150)
@given(json_values, json_values)
def test_a_workers_profile_result_is_bounded_whatever_it_says(top, fields):
    fields = {**fields, "top": top} if isinstance(fields, dict) else {"top": top, "state": "written"}
    r = actions.read_result(3, fields, "torch.profiler", "rank-3/profiles/x.json.gz")
    assert len(r["top"]) <= actions.TOP_OPS and all(len(t["name"]) <= actions.OP_NAME_MAX for t in r["top"])
    assert r["why"] is None or len(r["why"]) <= actions.WHY_MAX
    assert r["bytes"] is None or 0 <= r["bytes"] < 1 << 62
    profile_text.top_lines(r, 10)


line_words = ('{"ts": ', '"event": ', '"report"', '"alert"', '"rank": ', '"step": ', '"loss": ', ', ', "null",
              '"pid": ', '"child_of": ', "1733456789.5", "0", "\n", '"nan"')
lines_of_events = texts(*line_words, pieces=30).map(lambda s: s.encode("utf-8", "surrogatepass"))


@budget(150)
@given(lines_of_events)
def test_events_lines_read_unparsed_are_bounded(data):
    """The replay's report index and window, its last report, and the thinning pass's index read
    lines by pattern: each capture converts (ranks and pids within 18 digits)."""
    idx = reports.ReportIndex()
    idx.extend(data, len(data))
    for r in list(idx.series)[:3]:
        assert 0 <= r < 10 ** 18
        reports.last_report(data, r, len(data))
    reports.window(data, len(data), [0, 1], 5, len(data))
    index = thinning._Index()
    for line in data.split(b"\n"):
        index.add(line, {})
    for m in eventlines.OWN_REPORT.finditer(data):
        assert b"\n" not in m.group(0)


@budget(80)
@given(st.lists(texts(pieces=5) | st.sampled_from(HUGE), min_size=1, max_size=6))
def test_a_status_whose_names_a_worker_chose_makes_a_valid_page(names):
    """Phase and script names with lone surrogates, quotes, newlines and escapes: the page is
    valid UTF-8 and prometheus_client's parser reads every name back."""
    st_ = recording("straggler")["status"]
    st_["run"]["script"] = names[0]
    for w in st_["workers"]:
        if w["pace"] is not None:
            w["pace"]["phases"] = {n: 0.5 for n in names}
            w["pace"]["relative"] = {n: 1.0 for n in names}
    page = collector.text(collector.families(st_, "host\udcff"))
    got = {s.labels.get("phase") for f in text_string_to_metric_families(page.decode("utf-8"))
           for s in f.samples if f.name == "mpwatch_worker_phase_seconds"}
    assert got == {collector.label_value(n) for n in names}  # (the recording's ranks each have a pace)
    assert len(list(collector.RunCollector(lambda: st_, "h").collect())) == len(collector.families(st_, "h"))


class _Replies(Requests):
    """A transport whose replies are whatever the test says (a remote supervisor's, any version)."""

    def __init__(self, reply: object):
        self.reply = reply

    def request(self, cmd: str, /, **args: object):
        return self.reply if isinstance(self.reply, dict) else {"ok": True}


@budget(150)
@given(st.fixed_dictionaries({}, optional={"events": json_values, "seq": json_values, "history": json_values,
                                           "lines": json_values}))
def test_a_replys_parts_are_taken_by_their_types(reply):
    r = _Replies({"ok": True, **reply})
    ev = r.events(5)
    assert type(ev["seq"]) is int and all(isinstance(e, dict) for e in ev["events"])
    assert all(as_number(x) is not None and as_number(y) is not None for x, y in r.history(0))
    assert all(isinstance(x, str) for x in r.logs(0))



EVENT_NAMES = sorted({*CONTROL, "worker_started", "worker_exited", "stalled", "recovered", "slow_start", "alert",
                      "gpu_alert", "dump", "restarted", "resized", "stopping", "paused", "resumed",
                      "reports_rejected", "bad_frame", "run_started", "run_finished", "memory_written", "round",
                      "stop_signal", "tunable_refused", "checkpoint_taken", "memory_requested"})
FIELDS = ["step", "state", "cause", "kind", "message", "detail", "limit", "why", "id", "ranks", "steps", "path",
          "bytes", "to", "from", "exit_code", "signal", "where", "collective", "reason", "tunable", "value", "old",
          "count", "silent_for", "late", "tool", "held_ms", "top", "gpu", "update", "base_rank", "nprocs", "grace",
          "severity", "stderr_tail", "at", "by"]
# each field any of the types a crafted line may give it (cheap to draw: many fields an event)
wrong_types = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 20), 10 ** 20), st.floats(), st.text(max_size=4),
                        st.lists(st.none() | st.integers(0, 3) | st.text(max_size=2), max_size=3), st.just({"a": 1}))
any_event = st.fixed_dictionaries(
    {"ts": st.floats(0, 2e9), "event": st.sampled_from(EVENT_NAMES), "rank": st.none() | st.integers(-1, 6)},
    optional={k: wrong_types for k in FIELDS})


@budget(120)
@given(st.lists(any_event, min_size=1, max_size=6))
def test_an_event_of_any_fields_is_worded(evs):
    """What the TUI's event list, its notices and `show` say of an event read from a crafted
    events.jsonl (text.eventtext): a line or none, never an exception."""
    from mpwatch.text import eventtext

    for e in evs:
        got = eventtext.line(e)
        assert got is None or isinstance(got, str)
        eventtext.notice(e)
        eventtext.severity(e)
    eventtext.exits_notice(evs)
