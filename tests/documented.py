"""The numbers the manual promises (README.md, docs/*.md), in one table: what the docs print about
behaviour, each with the words that print it and the places in the code that hold it.

Two kinds of tests read it. tests/test_documented.py holds the docs and the code to each value:
every page says the words, every place in the code has the number. The tests of each rule take
their expectation from here, never from the product's own constant, and assert the behaviour at
the documented number (just below it: nothing; at it, or just past it where the rule says "after":
the finding): a constant changed in the code fails both, a number changed in the docs fails the
first. A value changes here only together with the docs that print it.

Standard library only; the code's values are read lazily (`Promise.code`), so a test module that
imports a constant from here imports no mpwatch module by it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any

MiB = 1 << 20


# --------------------------------------------------------------- the numbers ----
# Hangs and findings (docs/hangs.md)
STALL_TIMEOUT_S = 60.0  # --stall-timeout's default: silent this long after a report is stalled
STARTUP_TIMEOUT_S = 600.0  # --startup-timeout's default: no first report this long after the start
STRAGGLER_APPEAR = 0.25  # the straggler's score (a share of the step) that makes the finding...
STRAGGLER_HOLD_S = 8.0  # ...held this long; and the finding ends under...
STRAGGLER_END = 0.12  # ...this share, held as long
PACE_STRETCHES = 12  # a pace: the medians of a rank's latest stretches
STRETCH_STEPS = 5  # a stretch: at least these many steps...
STRETCH_S = 1.0  # ...and this long
CPU_WAIT_MARGIN = 0.15  # short of CPU: its run delay beyond its peers' median by this share of the time

# The training loop and the screen (README.md)
FLUSH_S = 0.25  # the sender ships a batch this often...
FLUSH_WORKERS = 128  # ...every workers / this many seconds in wide runs...
FLUSH_MAX_S = 2.0  # ...at most this long
FOLD = 8  # a flush holding more reports than this folds them
BUFFER_REPORTS = 2048  # reports kept for a sender held up; past them the oldest go, counted
METRIC_TEXT = 256  # characters of a text metric
METRICS_MAX = 64  # metrics a report
TOAST_SIZE = (120, 36)  # toasts show from this terminal size
REFRESHES_PER_S = 4  # the screen's refreshes a second, at most...
REFRESH_CPU = 0.10  # ...while refreshing costs less than this share of a core...
REFRESHES_MIN_PER_S = 1  # ...and never fewer than this
TREND_LOG_SPAN = 10  # the trend (and the loss plot) on a log scale from this span
TREND_FLAT = 1e-6  # a trend that moves by less than this share is flat

# Control (docs/control.md)
PLAN_MARGIN_S = 2.0  # a checkpoint's step: two flush intervals ahead and this margin
FAR_STEPS = 1000  # a rank this many steps ahead of the median is not followed
MAX_STEP = 2**53  # steps are bounded to this
TUNABLES_MAX = 256  # tunables a run keeps
GRACE_S = 10.0  # --grace's default

# Profiles (docs/profiles.md)
PROFILE_STEPS = 5  # `ctl profile` without --steps
PROFILE_STEPS_MAX = 50  # N is 1 to this
PROFILE_WALL_S = 300.0  # a profile still running after this stops at its next step
PROFILE_TRACE_MAX = 512 * MiB  # a gzipped trace past this is not kept
PROFILES_AT_ONCE = 1  # profiles running on a rank at once

# GPU alerts (docs/gpu-alerts.md)
OOM_SNAPSHOTS = 4  # snapshots a process writes at its OOMs
OOM_SNAPSHOT_MAX = 2 << 30  # bytes of one
CUDA_VIEW_S = 1.0  # the CUDA view is read at most this often (docs/architecture.md)

# After the fact (docs/after-the-fact.md)
REPORT_EVENT_S = 1.0  # a rank's report events: one this often at most
EVENTS_KEPT = 1000  # the events a live TUI's events screen gets from the supervisor
THIN_TARGET = 0.75  # thinning goes on until the file fits in this share of its cap

# Other machines and nodes (docs/remote.md, docs/nodes.md)
NODE_RETRY_S = (1.0, 2.0, 4.0, 8.0, 15.0)  # a lost node is tried again after these, then every last one
EXIT_BARRIER_S = 300.0  # a node whose workers ended waits this long for the others

# Reliability and security (docs/reliability.md, docs/metrics.md, docs/settings.md)
SETSID_FOUND_S = 2.0  # a child that left its worker's process group is found within this
WIDE_SETSID_FOUND_S = 8.0  # ...and within this past 128 workers (a look every 4 s, a scan at every other)
HANDSHAKE_S = 5.0  # a peer that never answers the handshake is cut off after this
COMMAND_REREADS = 20  # a GPU process's command read again while it is its parent's, at most
HELD_MAX = 1024  # a starting rank's messages kept until its pid is known
SOCKET_PATH_MAX = 107  # bytes of a socket's path: a run whose socket would pass it is refused
JSONL_LINE_MAX = 4 * MiB  # a .jsonl line past this is skipped unread
JSON_MAX = 256 * MiB  # a JSON file past this is not read
LOG_SCAN_MAX = 16 * MiB  # a log's lines looked for through at most this
LOG_LINE_SHOWN = 4096  # a log line past this is shown cut
METRICS_CONNECTIONS = 16  # the metrics port serves this many at once
METRICS_SILENT_S = 10.0  # and cuts off a peer silent this long
HEALTHZ_STALE_S = 10.0  # /healthz answers 503 once the loop has not ticked for this long
WORKERS_FLOOR = 64  # the most workers a run may have: the larger of this...
WORKERS_PER_CPU = 4  # ...and this many per CPU or GPU
RANKS_PER_TICK = 8  # ranks started a tick
CUDA_LOSS_WAIT_S = (
    10.0  # a step whose CUDA loss is not there after this goes without it (docs/automatic-steps.md)
)


# ---------------------------------------------------------------- the table ----
def _g(v: float) -> str:
    return f"{v:g}"


WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def _attr(path: str) -> Callable[[], Any]:
    """'mpwatch.x.y:NAME' read when asked."""
    module, _, name = path.partition(":")
    return lambda: getattr(import_module(module), name)


def _scaled(path: str, by: float) -> Callable[[], Any]:
    read = _attr(path)
    return lambda: read() / by


def _wide_found() -> Callable[[], Any]:
    """The longest a setsid'd child waits to be found past SAMPLE_WIDER workers: the looks until
    the process table's scan is old enough, each an interval long."""

    def read() -> Any:
        from mpwatch.supervisor.diagnose import sampler

        n = sampler.SAMPLE_WIDER + 1
        step = sampler.interval(n)
        return -(-sampler.tree_s(n) // step) * step  # (the scan's age is due at the first look past it)

    return read


def _parsed(dest: str) -> Callable[[], Any]:
    """A `mpwatch` flag's default, as the command line parses it."""

    def read() -> Any:
        from mpwatch import cli

        return getattr(cli.run_parser({}).parse_args(["train.py"]), dest)

    return read


def _helped(flag: str) -> Callable[[], Any]:
    """The default a flag's --help text says: '(default N)'."""

    def read() -> Any:
        from mpwatch import cli

        parser = cli.run_parser({})
        action = next(a for a in parser._actions if flag in a.option_strings)
        m = re.search(r"\(default ([0-9.]+)\)", action.help or "")
        return float(m.group(1)) if m else None

    return read


def _field_default(path: str, name: str) -> Callable[[], Any]:
    """A dataclass field's default ('mpwatch.x:Class', 'field')."""

    def read() -> Any:
        import dataclasses

        cls = _attr(path)()
        return next(f.default for f in dataclasses.fields(cls) if f.name == name)

    return read


def _param_default(path: str, param: str) -> Callable[[], Any]:
    """A callable's parameter default ('mpwatch.x:func_or_class', 'param')."""

    def read() -> Any:
        import inspect

        return inspect.signature(_attr(path)()).parameters[param].default

    return read


def _flush(workers: int) -> Callable[[], Any]:
    def read() -> Any:
        from mpwatch.contract import protocol

        return protocol.flush_interval(workers, 1e9)

    return read


ACTION_TESTS = "tests/test_worker_actions.py"
NOTICE_TESTS = "tests/tui/test_notices.py"
POLLER_TESTS = "tests/tui/test_poller.py"
PROFILE_TESTS = "tests/test_profile_bounds.py"
RETRY_TESTS = "tests/remote/test_node_retry.py"
RULE_TESTS = "tests/supervisor/test_straggler_rule.py"
STALL_TESTS = "tests/supervisor/test_stall.py"


def _in(path: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{path}::{n}" for n in names)


@dataclass(frozen=True)
class Promise:
    """A documented number: `says` are the words on `page` that print it (whitespace as any),
    `code` reads each place in the code that holds it (in the documented unit); `behaviour` names
    the tests that hold the behaviour to it."""

    name: str
    value: Any
    page: str
    says: Sequence[str]
    code: Sequence[Callable[[], Any]]
    behaviour: Sequence[str] = ()


def _table() -> list[Promise]:
    P = Promise
    return [
        # docs/hangs.md
        P(
            "STALL_TIMEOUT_S",
            STALL_TIMEOUT_S,
            "docs/hangs.md",
            [f"`--stall-timeout` seconds (default {STALL_TIMEOUT_S:g})"],
            [
                _parsed("stall_timeout"),
                _helped("--stall-timeout"),
                _field_default("mpwatch.supervisor.options:Options", "stall_timeout"),
            ],
            _in(
                STALL_TESTS,
                "test_the_documented_stall_timeout_is_the_default_and_stalls_at_it",
            ),
        ),
        P(
            "STARTUP_TIMEOUT_S",
            STARTUP_TIMEOUT_S,
            "docs/hangs.md",
            [
                f"`--startup-timeout` (default {STARTUP_TIMEOUT_S:g} s",
                f'"slow start: no first report after {STARTUP_TIMEOUT_S / 60:g}m"',
            ],
            [
                _parsed("startup_timeout"),
                _helped("--startup-timeout"),
                _field_default("mpwatch.supervisor.options:Options", "startup_timeout"),
                _param_default("mpwatch.supervisor.diagnose.stall_watch:StallWatch", "startup_timeout"),
            ],
            _in(
                STALL_TESTS,
                "test_the_documented_startup_timeout_is_the_default_and_is_a_slow_start_at_it",
            ),
        ),
        P(
            "STRAGGLER_APPEAR",
            STRAGGLER_APPEAR,
            "docs/hangs.md",
            [f"the finding needs {STRAGGLER_APPEAR:g} for {STRAGGLER_HOLD_S:g} s"],
            [_attr("mpwatch.contract.straggler:APPEAR")],
            _in(
                RULE_TESTS,
                "test_the_finding_appears_at_the_documented_share_held_the_documented_time",
            ),
        ),
        P(
            "STRAGGLER_HOLD_S",
            STRAGGLER_HOLD_S,
            "docs/hangs.md",
            [
                f"the finding needs {STRAGGLER_APPEAR:g} for {STRAGGLER_HOLD_S:g} s",
                f"ends under {STRAGGLER_END:g} for {STRAGGLER_HOLD_S:g} s",
            ],
            [
                _attr("mpwatch.contract.straggler:SCORE_HOLD_S"),
                _attr("mpwatch.contract.straggler:END_HOLD_S"),
            ],
            _in(
                RULE_TESTS,
                "test_the_finding_appears_at_the_documented_share_held_the_documented_time",
                "test_the_finding_ends_under_the_documented_share_held_the_documented_time",
            ),
        ),
        P(
            "STRAGGLER_END",
            STRAGGLER_END,
            "docs/hangs.md",
            [f"ends under {STRAGGLER_END:g} for {STRAGGLER_HOLD_S:g} s"],
            [_attr("mpwatch.contract.straggler:END")],
            _in(
                RULE_TESTS,
                "test_the_finding_ends_under_the_documented_share_held_the_documented_time",
            ),
        ),
        P(
            "PACE_STRETCHES",
            PACE_STRETCHES,
            "docs/hangs.md",
            [f"the medians of its latest {PACE_STRETCHES} stretches of steps"],
            [_attr("mpwatch.contract.pace:WINDOW")],
        ),
        P(
            "STRETCH_STEPS",
            STRETCH_STEPS,
            "docs/hangs.md",
            [f"a stretch: at least {STRETCH_STEPS} steps and {STRETCH_S:g} s"],
            [_attr("mpwatch.contract.pace:STRETCH_STEPS")],
        ),
        P(
            "STRETCH_S",
            STRETCH_S,
            "docs/hangs.md",
            [f"a stretch: at least {STRETCH_STEPS} steps and {STRETCH_S:g} s"],
            [_attr("mpwatch.contract.pace:STRETCH_S")],
        ),
        P(
            "CPU_WAIT_MARGIN",
            CPU_WAIT_MARGIN,
            "docs/hangs.md",
            [f"beyond its peers' by {CPU_WAIT_MARGIN * 100:g} points"],
            [_attr("mpwatch.supervisor.diagnose.slowness:CPU_WAIT_OVER")],
            _in(
                RULE_TESTS,
                "test_short_of_cpu_takes_the_documented_margin_over_the_peers",
            ),
        ),
        # README.md
        P(
            "FLUSH_S",
            FLUSH_S,
            "README.md",
            [f"a sender thread ships it every {FLUSH_S:g} s"],
            [_attr("mpwatch.worker.channel:FLUSH_S"), _flush(1), _flush(int(FLUSH_S * FLUSH_WORKERS))],
        ),
        P(
            "FLUSH_WORKERS",
            FLUSH_WORKERS,
            "README.md",
            [f"(every `workers / {FLUSH_WORKERS}` s past {FLUSH_S * FLUSH_WORKERS:g} workers"],
            [lambda: round(64 / _flush(64)()), lambda: round(200 / _flush(200)())],
        ),
        P(
            "FLUSH_MAX_S",
            FLUSH_MAX_S,
            "README.md",
            [f"at most {FLUSH_MAX_S:g} s, so the supervisor's work stays flat"],
            [_flush(100_000)],
        ),
        P(
            "FOLD",
            FOLD,
            "README.md",
            [f"reports faster than {FOLD} times a flush"],
            [_attr("mpwatch.worker.batch:FOLD")],
        ),
        P(
            "BUFFER_REPORTS",
            BUFFER_REPORTS,
            "README.md",
            [f"{BUFFER_REPORTS} reports wait for a sender held up"],
            [_attr("mpwatch.worker.channel:BUFFER")],
            _in(
                "tests/test_worker_api.py",
                "test_reports_wait_for_a_held_up_sender_up_to_the_documented_number",
            ),
        ),
        P(
            "METRIC_TEXT",
            METRIC_TEXT,
            "README.md",
            [f"a text metric past {METRIC_TEXT} characters is cut"],
            [_attr("mpwatch.worker.bounds:MAX_TEXT")],
        ),
        P(
            "METRICS_MAX",
            METRICS_MAX,
            "README.md",
            [f"at most {METRICS_MAX} metrics a report"],
            [_attr("mpwatch.worker.bounds:MAX_METRICS_SENT")],
        ),
        P(
            "TOAST_SIZE",
            TOAST_SIZE,
            "README.md",
            [f"they leave the table in view ({TOAST_SIZE[0]}x{TOAST_SIZE[1]} and more)"],
            [lambda: (_attr("mpwatch.tui.app:TOAST_W")(), _attr("mpwatch.tui.app:TOAST_H")())],
            _in(
                NOTICE_TESTS,
                "test_a_toast_shows_from_the_documented_size",
            ),
        ),
        P(
            "REFRESHES_PER_S",
            REFRESHES_PER_S,
            "README.md",
            [f"The screen refreshes up to {REFRESHES_PER_S} times a second"],
            [
                lambda: 1 / _attr("mpwatch.tui.poller:INTERVAL_S")(),
                lambda: 1 / _param_default("mpwatch.tui.app:MpwatchApp", "interval")(),
            ],
            _in(
                POLLER_TESTS,
                "test_pace_stretches_past_the_budget_and_comes_back",
            ),
        ),
        P(
            "REFRESH_CPU",
            REFRESH_CPU,
            "README.md",
            [f"past {REFRESH_CPU * 100:g}% of a core"],
            [_attr("mpwatch.tui.poller:CPU_BUDGET")],
            _in(
                POLLER_TESTS,
                "test_pace_stretches_past_the_budget_and_comes_back",
            ),
        ),
        P(
            "REFRESHES_MIN_PER_S",
            REFRESHES_MIN_PER_S,
            "README.md",
            ["at least once a second"],
            [lambda: 1 / _attr("mpwatch.tui.poller:MAX_INTERVAL_S")()],
            _in(
                POLLER_TESTS,
                "test_pace_stretches_past_the_budget_and_comes_back",
            ),
        ),
        P(
            "TREND_LOG_SPAN",
            TREND_LOG_SPAN,
            "README.md",
            [
                f"a log scale when it spans {TREND_LOG_SPAN}x or more",
                f"it opens on log where the loss spans {TREND_LOG_SPAN}x",
            ],
            [_attr("mpwatch.tui.render.bars:LOG_SPAN")],
        ),
        P(
            "TREND_FLAT",
            TREND_FLAT,
            "README.md",
            ["flat when it moves by less than a millionth"],
            [_attr("mpwatch.tui.render.bars:FLAT_SHARE")],
        ),
        # docs/control.md
        P(
            "PLAN_MARGIN_S",
            PLAN_MARGIN_S,
            "docs/control.md",
            [f"its steps per second over two flush intervals and a margin of {PLAN_MARGIN_S:g} s"],
            [_attr("mpwatch.supervisor.live.plan:MARGIN_S")],
        ),
        P(
            "FAR_STEPS",
            FAR_STEPS,
            "docs/control.md",
            [f"(more than {FAR_STEPS} steps, and more than the median step"],
            [_attr("mpwatch.supervisor.live.plan:FAR_STEPS")],
        ),
        P(
            "MAX_STEP",
            MAX_STEP,
            "docs/control.md",
            ["Steps are bounded to 2^53", "one past 2^53"],
            [_attr("mpwatch.contract.protocol:MAX_STEP")],
        ),
        P(
            "TUNABLES_MAX",
            TUNABLES_MAX,
            "docs/control.md",
            [f"A run keeps {TUNABLES_MAX} tunables"],
            [
                _attr("mpwatch.supervisor.live.records:TUNABLES_MAX"),
                _attr("mpwatch.worker.control_state:DECLARED_MAX"),
            ],
        ),
        P(
            "GRACE_S",
            GRACE_S,
            "docs/control.md",
            [f"after `--grace` seconds (default {GRACE_S:g})"],
            [
                _parsed("grace"),
                _helped("--grace"),
                _field_default("mpwatch.supervisor.options:Options", "grace"),
            ],
        ),
        # docs/profiles.md
        P(
            "PROFILE_STEPS",
            PROFILE_STEPS,
            "docs/profiles.md",
            [f"for N steps ({PROFILE_STEPS} by default, at most {PROFILE_STEPS_MAX})"],
            [_attr("mpwatch.contract.actions:PROFILE_STEPS")],
        ),
        P(
            "PROFILE_STEPS_MAX",
            PROFILE_STEPS_MAX,
            "docs/profiles.md",
            [f"N is 1 to {PROFILE_STEPS_MAX}"],
            [
                _attr("mpwatch.contract.actions:PROFILE_STEPS_MAX"),
                _attr("mpwatch.worker.profile:STEPS_MAX"),
                _attr("mpwatch.supervisor.live.flame:SECONDS_MAX"),
            ],
        ),
        P(
            "PROFILE_WALL_S",
            PROFILE_WALL_S,
            "docs/profiles.md",
            [f"a profile still running after {PROFILE_WALL_S / 60:g} minutes stops at its next step"],
            [_attr("mpwatch.worker.profile:WALL_MAX_S")],
            _in(
                PROFILE_TESTS,
                "test_a_profile_stops_at_its_next_step_past_the_documented_time",
            ),
        ),
        P(
            "PROFILE_TRACE_MAX",
            PROFILE_TRACE_MAX,
            "docs/profiles.md",
            [f"a gzipped trace past {PROFILE_TRACE_MAX // MiB} MiB is not kept"],
            [_attr("mpwatch.worker.profile:TRACE_MAX")],
            _in(
                PROFILE_TESTS,
                "test_a_trace_past_the_documented_size_is_not_kept",
            ),
        ),
        P(
            "PROFILES_AT_ONCE",
            PROFILES_AT_ONCE,
            "docs/profiles.md",
            [f"{WORDS[PROFILES_AT_ONCE]} profile at a time on a rank (a second one asked"],
            [],
            _in(
                ACTION_TESTS,
                "test_an_action_starts_at_its_step_from_report_alone_and_answers_twice",
            ),
        ),
        # docs/gpu-alerts.md, docs/architecture.md
        P(
            "OOM_SNAPSHOTS",
            OOM_SNAPSHOTS,
            "docs/gpu-alerts.md",
            [f"at the moment of its OOM (at most {OOM_SNAPSHOTS} a process)"],
            [_attr("mpwatch.worker.cuda_memory:OOM_SNAPSHOTS_MAX")],
        ),
        P(
            "OOM_SNAPSHOT_MAX",
            OOM_SNAPSHOT_MAX,
            "docs/gpu-alerts.md",
            [f"at most {OOM_SNAPSHOT_MAX >> 30} GiB, in a folder"],
            [_attr("mpwatch.worker.cuda_memory:SNAPSHOT_MAX")],
        ),
        P(
            "CUDA_VIEW_S",
            CUDA_VIEW_S,
            "docs/architecture.md",
            ["reads torch's allocator counters on the sender thread, at most once a second"],
            [_attr("mpwatch.worker.batch:CUDA_EVERY_S")],
        ),
        # docs/after-the-fact.md
        P(
            "REPORT_EVENT_S",
            REPORT_EVENT_S,
            "docs/after-the-fact.md",
            ["`report` events are kept to one a second"],
            [_attr("mpwatch.supervisor.workers.ledger:REPORT_EVENT_S")],
        ),
        P(
            "EVENTS_KEPT",
            EVENTS_KEPT,
            "docs/after-the-fact.md",
            [f"(as many as the supervisor keeps, {EVENTS_KEPT})"],
            [_attr("mpwatch.supervisor.eventlog:RECENT_EVENTS"), _attr("mpwatch.tui.app:EVENTS_KEPT")],
        ),
        P(
            "THIN_TARGET",
            THIN_TARGET,
            "docs/after-the-fact.md",
            ["until it fits in three quarters of the cap"],
            [_attr("mpwatch.rundir.thinning:TARGET")],
        ),
        # docs/remote.md, docs/nodes.md
        P(
            "NODE_RETRY_S",
            NODE_RETRY_S,
            "docs/remote.md",
            [
                "tried again (after "
                + ", ".join(_g(s) for s in NODE_RETRY_S[:-1])
                + f", then every {NODE_RETRY_S[-1]:g} s)"
            ],
            [_attr("mpwatch.sources.multinode.source:RETRY_S")],
            _in(
                RETRY_TESTS,
                "test_a_lost_node_is_tried_again_after_the_documented_pauses",
            ),
        ),
        P(
            "EXIT_BARRIER_S",
            EXIT_BARRIER_S,
            "docs/nodes.md",
            [f"waits for the other nodes, up to {EXIT_BARRIER_S:g} s (torchrun's exit barrier)"],
            [_attr("mpwatch.supervisor.nodes.cluster:EXIT_BARRIER_S")],
        ),
        # docs/reliability.md, docs/metrics.md, docs/settings.md, docs/automatic-steps.md
        P(
            "SETSID_FOUND_S",
            SETSID_FOUND_S,
            "docs/reliability.md",
            [f"is found by the process sampler within {WORDS[int(SETSID_FOUND_S)]} seconds"],
            [_attr("mpwatch.probes.procs:TREE_S")],
        ),
        P(
            "WIDE_SETSID_FOUND_S",
            WIDE_SETSID_FOUND_S,
            "docs/reliability.md",
            [f"scans for new descendants at every other look, it is found within {WIDE_SETSID_FOUND_S:g} s"],
            [_wide_found()],
        ),
        P(
            "HANDSHAKE_S",
            HANDSHAKE_S,
            "docs/reliability.md",
            [f"a peer that never answers is cut off after {HANDSHAKE_S:g} s"],
            [_attr("mpwatch.supervisor.ipc.sockets:HANDSHAKE_S")],
        ),
        P(
            "COMMAND_REREADS",
            COMMAND_REREADS,
            "docs/reliability.md",
            [f"read again at each look, {COMMAND_REREADS} times at most"],
            [_attr("mpwatch.supervisor.gpu.labels:SETTLE_READS")],
        ),
        P(
            "HELD_MAX",
            HELD_MAX,
            "docs/reliability.md",
            [f"{HELD_MAX:,} messages at most"],
            [_attr("mpwatch.supervisor.workers.ledger:HELD_MAX")],
        ),
        P(
            "SOCKET_PATH_MAX",
            SOCKET_PATH_MAX,
            "docs/settings.md",
            [f"would pass {SOCKET_PATH_MAX} bytes"],
            [_attr("mpwatch.rundir.registry:SOCKET_PATH_MAX")],
        ),
        P(
            "JSONL_LINE_MAX",
            JSONL_LINE_MAX,
            "docs/reliability.md",
            [f"a `.jsonl` line past {JSONL_LINE_MAX // MiB} MiB is skipped unread"],
            [_attr("mpwatch.rundir.textfiles:MAX_LINE")],
        ),
        P(
            "JSON_MAX",
            JSON_MAX,
            "docs/reliability.md",
            [f"a JSON file past {JSON_MAX // MiB} MiB is not read"],
            [_attr("mpwatch.rundir.textfiles:MAX_JSON")],
        ),
        P(
            "LOG_SCAN_MAX",
            LOG_SCAN_MAX,
            "docs/reliability.md",
            [f"its lines looked for through at most {LOG_SCAN_MAX // MiB} MiB"],
            [_attr("mpwatch.rundir.textfiles:SCAN_MAX")],
        ),
        P(
            "LOG_LINE_SHOWN",
            LOG_LINE_SHOWN,
            "docs/reliability.md",
            [f"a line past {LOG_LINE_SHOWN // 1024} KiB shown cut"],
            [_attr("mpwatch.rundir.textfiles:LINE_KEEP")],
        ),
        P(
            "METRICS_CONNECTIONS",
            METRICS_CONNECTIONS,
            "docs/metrics.md",
            [f"The port serves at most {METRICS_CONNECTIONS} connections at once"],
            [_attr("mpwatch.supervisor.metrics.server:MAX_CONNECTIONS")],
        ),
        P(
            "METRICS_SILENT_S",
            METRICS_SILENT_S,
            "docs/metrics.md",
            [f"cuts off a peer silent for {METRICS_SILENT_S:g} s"],
            [_attr("mpwatch.supervisor.metrics.server:READ_TIMEOUT_S")],
        ),
        P(
            "HEALTHZ_STALE_S",
            HEALTHZ_STALE_S,
            "docs/metrics.md",
            [f"(503 once it has not for {HEALTHZ_STALE_S:g} s)"],
            [_attr("mpwatch.supervisor.metrics.server:STALE_S")],
        ),
        P(
            "WORKERS_FLOOR",
            WORKERS_FLOOR,
            "docs/settings.md",
            [f"| {WORKERS_FLOOR}, or {WORKERS_PER_CPU} per CPU or GPU if more |"],
            [_attr("mpwatch.supervisor.options:CAP_FLOOR")],
        ),
        P(
            "WORKERS_PER_CPU",
            WORKERS_PER_CPU,
            "docs/reliability.md",
            [f"the larger of {WORKERS_FLOOR} and {WORKERS_PER_CPU} per CPU or GPU"],
            [_attr("mpwatch.supervisor.options:PER_CPU")],
        ),
        P(
            "RANKS_PER_TICK",
            RANKS_PER_TICK,
            "docs/settings.md",
            [f"ranks start {RANKS_PER_TICK} a tick"],
            [_attr("mpwatch.supervisor.resize:START_PER_TICK")],
        ),
        P(
            "CUDA_LOSS_WAIT_S",
            CUDA_LOSS_WAIT_S,
            "docs/automatic-steps.md",
            [f"a step whose loss is not there after {CUDA_LOSS_WAIT_S:g} s goes without it"],
            [_attr("mpwatch.worker.auto.loss:READY_WAIT_S")],
        ),
    ]


TABLE: list[Promise] = _table()
