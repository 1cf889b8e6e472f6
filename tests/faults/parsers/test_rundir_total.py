"""Property tests (issue 39): a real run's directory with any lines added to its events.jsonl
and gpu.jsonl (valid events with hostile fields, JSON nested past the bound, numbers of
hundreds of digits, escapes, lone surrogates, lines cut mid-character): `summary`, `ls --all`
and the replay of `show` read it through, in process, and never raise; what they print is
made printable."""
from __future__ import annotations

import json
import shutil

from hypothesis import given
from hypothesis import strategies as st

from mpwatch.cli import listing, summary
from mpwatch.rundir import postmortem, reader
from mpwatch.sources.replay import ReplaySource
from mpwatch.text import safe
from tests.faults.parsers.hostile import as_bytes, budget, json_texts, json_values

EVENTS = ["worker_started", "worker_exited", "report", "alert", "gpu_alert", "stalled", "dump", "stopping",
          "restarted", "resized", "run_finished", "profile_requested", "profile_written", "checkpoint_requested",
          "tunable_declared", "tunable_set", "thinned", "slow_start", "recovered"]
events = st.fixed_dictionaries(
    {"ts": st.floats(1.7e9, 2e9) | json_values, "event": st.sampled_from(EVENTS),
     "rank": st.none() | st.integers(0, 3) | json_values},
    optional={k: json_values for k in ("step", "loss", "state", "cause", "stderr_tail", "kind", "message", "key",
                                       "id", "ranks", "steps", "path", "why", "to", "exit_code", "where",
                                       "reason", "tunable", "type", "value", "reports_before", "straggler")})
event_lines = st.one_of(events.map(lambda e: json.dumps(e).encode()), json_texts.map(lambda s: s.encode(
    "utf-8", "surrogatepass")), as_bytes('{"ts": ', '"event": "report", ', '"rank": 0'))
gpu_lines = st.one_of(json_values.map(lambda v: json.dumps({"ts": 1.8e9, "gpus": v, "ranks": v}).encode()),
                      json_values.map(lambda v: json.dumps({"ts": 1.8e9, "gpu": 0, "kind": v, "text": v}).encode()),
                      as_bytes('{"ts":1.8e9,"gpus":', '{"index":0,"mem_used":'))


@budget(25)
@given(st.lists(event_lines, max_size=10), st.lists(gpu_lines, max_size=4), st.booleans())
def test_a_run_with_any_lines_added_is_summarised_listed_and_replayed(crashed, tmp_path_factory, evs, gpus, torn):
    d = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(crashed.dir, d, symlinks=True)
    with open(d / "events.jsonl", "ab") as f:
        f.write(b"".join(line.replace(b"\n", b" ") + b"\n" for line in evs) + (b'{"ts": 1' if torn else b""))
    with open(d / "gpu.jsonl", "ab") as f:
        f.write(b"".join(line.replace(b"\n", b" ") + b"\n" for line in gpus))
    s = postmortem.summarize(reader.read(d))
    text = safe.text(summary.summary_lines(s))
    assert "\x1b" not in text and "\x07" not in text
    json.dumps(s)  # `summary --json` (its escapes are JSON's)
    listing.ended_text(postmortem.listing(reader.read(d)))
    src = ReplaySource(d)
    src.read_all()
    for how in ("seq", "end"):
        src.move(how, 1)
        st_ = src.status()
        src.events(0)
        for w in st_["workers"][:2]:
            src.history(w["rank"])
        src.gpu_timeline(600)
    shutil.rmtree(d.parent, ignore_errors=True)


@budget(20)
@given(st.sampled_from(["started", "finished"]), st.sampled_from([1e300, -1e300, 1e11, -1.0, 2 ** 70]))
def test_a_time_no_clock_shows_is_read_as_unknown(crashed, tmp_path_factory, key, when):
    """run.json saying a run started at 1e300: time.localtime() refused it, and `summary` and
    `ls --all` ended in a traceback; now the time is unknown and the first event's is used."""
    d = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(crashed.dir, d, symlinks=True)
    info = json.loads((d / "run.json").read_text())
    info[key] = when
    (d / "run.json").write_text(json.dumps(info))
    rd = reader.read(d)
    assert rd.run.started is not None and 0 < rd.run.started < 1e11
    summary.summary_lines(postmortem.summarize(rd))
    listing._print_all([postmortem.listing(reader.read(d))])
    shutil.rmtree(d.parent, ignore_errors=True)
