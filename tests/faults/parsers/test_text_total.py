"""Property tests (issue 39): every parser of a run's text (a worker's stderr, torch's OOM
message, NCCL's watchdog line, a traceback, a stack dump, py-spy's and torch's flight-recorder
analyzer's output, Slurm's variables, a number typed or sent as text) returns a value or a
refusal for any input, its numbers within their bounds (never round(inf), never int() of
thousands of digits), and never raises."""
from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from mpwatch.cli import slurm
from mpwatch.contract import numtext
from mpwatch.probes import pyspy
from mpwatch.rundir import crash
from mpwatch.supervisor.diagnose import flight, flight_join
from mpwatch.supervisor.gpu import oom_words
from mpwatch.supervisor.workers import exits
from mpwatch.text import fmt, stackfmt
from tests.faults.parsers.hostile import HUGE, NOT_ASCII_DIGITS, budget, json_values, lines, texts

OOM_WORDS = ("CUDA out of memory. ", "Tried to allocate ", " GiB", " MiB", " bytes", "GPU ", "Process ",
             " has ", " memory in use", "total capacity of ", "of which ", " is free", "this process has ",
             "Of the allocated memory ", " is allocated by PyTorch", "and ", " is reserved by PyTorch but unallocated",
             " reserved in total by PyTorch", " already allocated", "; ", " total capacity", "2.00", "79.15")
NCCL = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=", ", OpType=", "ALLREDUCE", ", Timeout(ms)=",
        ") ran for ", " milliseconds", "600000", "[rank0]:")
TRACEBACK = ("Traceback (most recent call last):", '  File "/x/train.py", line ', " in main", "    ^^^^",
             "ValueError: bad", "RuntimeError:", "[rank1]: ", "SyntaxError: invalid syntax", "--- mpwatch: ",
             " ---", "[/src/pair.cc:545] ", ". This is typically caused by x", "?[1m", "\x1b[0m")
DUMP = (stackfmt.HEADER, "Current thread 0x00007f", "Thread 0x0000", " (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line ', " in wait", "--- py-spy --native: pid ", " ---",
        'Thread 1234 (idle): "MainThread"', "c10d::Reducer::", "ProcessGroupNCCL::WorkNCCL::wait")
ANALYZER = ("Not all ranks joining collective, sequence number: ", "collective: nccl:all_reduce",
            "missing ranks: {", "}", ", ", "1, 2", "\n")
PYSPY = ("Error: ", "Process ", "Thread ", "Permission denied", "1: ", "12: cause", "ptrace")


@budget(200)
@given(texts(*OOM_WORDS, pieces=24))
def test_the_oom_words_are_read_within_bounds(text):
    w = oom_words.read(text)
    sizes = [w.tried, w.total, w.free, w.allocated, w.reserved, w.this_process, w.cached,
             *(b for _, b in w.processes)]
    assert all(s is None or (type(s) is int and 0 <= s <= oom_words.BYTES_MAX) for s in sizes), w
    assert w.device is None or 0 <= w.device < 10 ** 4
    assert len(w.processes) <= oom_words.PROCESSES_MAX


def test_a_size_of_320_digits_is_not_said():
    """Issue 39 item 1's root: round(float('9'*320) * 2**30) raised OverflowError."""
    w = oom_words.read(f"CUDA out of memory. Tried to allocate {'9' * 320} GiB. GPU 0 has a total capacity of "
                       "79.15 GiB of which 1.25 GiB is free.")
    assert w.tried is None and w.total == round(79.15 * (1 << 30)) and w.device == 0


@budget(200)
@given(lines(*NCCL, *TRACEBACK), st.integers(-200, 300), st.sampled_from([None, "kill", "restart", "stop", "x"]))
def test_an_exit_is_judged_from_any_stderr(tail, code, reason):
    end = exits.judge(code, reason, tail, exits.PeerEnd(1, "was killed", 3.0), True, "SIGTERM")
    assert isinstance(end.cause, str) and len(end.cause) < 3 * crash.LINE_MAX
    timeout = exits.nccl_timeout(tail)
    assert timeout is None or len(timeout) < 200


@budget(150)
@given(lines(*TRACEBACK, n=30))
def test_a_cause_is_read_from_any_traceback(tail):
    for said in (crash.error_line(tail), crash.exception_line(tail), crash.clean(" ".join(tail))):
        assert said is None or len(said) <= 2 * crash.LINE_MAX + 40


def test_a_tail_of_huge_lines_is_read_in_bounded_time():
    """An event's stderr_tail may hold lines of megabytes and thousands of lines (a crafted
    events.jsonl): only the last LINES_MAX lines, LINE_MAX characters each, are looked at."""
    tail = ["[" * 1_000_000, "  File " + '"' * 1_000_000] * 3000
    assert crash.error_line(tail) is not None
    assert crash.clean("[" * 1_000_000 + ".cc:1]") != ""


@budget(150)
@given(texts(*DUMP, "\n", pieces=30), st.integers(0, 10 ** 20))
def test_a_stack_dump_of_any_text_is_read(text, pid):
    for proc in stackfmt.parse(text):
        assert proc["pid"] is None or 0 <= proc["pid"] < 10 ** numtext.INT_DIGITS
        for t in proc["threads"]:
            assert all(0 <= line < 10 ** 9 for _, line, _ in t["frames"])
    stackfmt.summarize(text, pid)
    stackfmt.native_collective(text, pid)


@budget(120)
@given(texts(*PYSPY, "\n", pieces=20))
def test_py_spys_output_is_judged(output):
    ok, note = pyspy.judge(output)
    assert ok or (note is not None and len(note) <= pyspy.NOTE_MAX + 80)


@budget(150)
@given(texts(*ANALYZER, pieces=24), st.lists(st.integers(0, 8), max_size=5))
def test_torchs_analyzer_output_is_read(text, ranks):
    f = flight_join.parse_torch(text, ranks)
    if f is not None:
        assert f.missing and all(0 <= r < 10 ** 9 for r in f.missing) and 0 < f.seq < 10 ** 18


@budget(150)
@given(st.dictionaries(st.integers(0, 4), json_values | st.fixed_dictionaries(
    {"entries": st.lists(json_values | st.fixed_dictionaries(
        {"collective_seq_id": json_values, "profiling_name": json_values, "pg_id": json_values,
         "process_group": json_values}), max_size=5)}), max_size=4))
def test_flight_recorder_dumps_of_any_shape_are_read(traces):
    groups = flight.not_joined(traces)
    for g in (groups or {}).values():
        assert type(g["seq"]) is int and set(g["missing"]) <= set(traces)


@budget(60)
@given(st.binary(max_size=200) | json_values.map(lambda v: pickle.dumps(v, protocol=2)))
def test_a_damaged_flight_dump_is_none_or_a_dict(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fr") / "nccl_trace_rank_0"
    path.write_bytes(data)
    got = flight.read_trace(path)
    assert got is None or isinstance(got, dict)


@budget(300)
@given(st.one_of(texts(pieces=3), st.sampled_from(HUGE + NOT_ASCII_DIGITS + ["0", "-0", "+1", " 1", "1 ", "007"])),
       st.integers(1, 30), st.booleans())
def test_numbers_in_text_are_ascii_digits_within_their_bound(text, digits, signed):
    got = numtext.int_of(text, digits, signed)
    body = text[1:] if signed and text.startswith("-") else text
    ascii_digits = 0 < len(body) <= digits and all("0" <= c <= "9" for c in body)
    assert (got is not None) == ascii_digits
    if got is not None:
        assert got == int(text)
    d = numtext.decimal_of(text)
    assert d is None or (d == d and abs(d) < 1e16)


@budget(150)
@given(texts("[", "]", "-", ",", "node", "0", "99999999999", "(x", ")", "1", pieces=12))
def test_slurms_lists_are_hosts_within_the_bound_or_refused(text):
    for read in (slurm.expand_nodelist, slurm._tasks_per_node):
        try:
            got = read(text)
        except slurm.SlurmError:
            continue
        assert len(got) <= slurm.HOSTS_MAX


@budget(150)
@given(st.lists(st.integers(-(10 ** 400), 10 ** 400) | st.integers(0, 50), max_size=30))
def test_ranks_in_words_are_linear_and_never_build_a_range(ranks):
    text = fmt.ranks(ranks)
    assert text.startswith(("rank", "no rank"))


class _Store:
    """A rendezvous store whose beats are whatever a peer wrote."""

    def __init__(self, values: list[bytes]):
        self.values = values

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self.values[:len(keys)]


@budget(100)
@given(st.lists(st.binary(max_size=40) | texts("up", "done", " ", "7", pieces=4).map(
    lambda s: s.encode("utf-8", "surrogatepass")), min_size=1, max_size=4))
def test_a_peers_beat_is_a_count_or_unknown(values):
    from mpwatch.supervisor.nodes import rendezvous

    for count, _ in rendezvous.beats(_Store(values), len(values)):
        assert count == -1 or 0 <= count < 10 ** numtext.INT_DIGITS


def test_a_rank_folder_is_named_as_the_writer_names_it():
    from mpwatch.rundir import layout

    assert [bool(layout.RANK_DIR.match(n)) for n in ("rank-0", "rank-12", "rank-٣", "rank-03", "rank-²",
                                                     "rank-" + "9" * 10, "rank-1 ")] == [True, True] + [False] * 5
