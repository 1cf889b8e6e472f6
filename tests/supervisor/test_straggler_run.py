"""Issue 32 through a real supervisor: three ranks of gloo on this machine, one of them made the
straggler the way real ones are, the others waiting for it in their collectives. The finding
names the rank and where it loses its time (with the script's own numbers), the status carries
each rank's pace, `ctl status --json` prints it, Prometheus serves the phase times and the
speeds, the run's summary and its replay say when the finding began and what it cost the run. The runs
that name nobody are tests/supervisor/test_straggler_rule.py's recordings and the 10-minute
balanced bench (bench/bench_straggler.py)."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mpwatch.sources.replay import ReplaySource
from mpwatch.text import fmt
from tests.helpers import FIXTURES, mpwatch, need, wait_for
from tests.supervisor.test_gpu_run import FAST, gpu_env, view

need("torch", "the straggler's runs are torch's (pip install -e '.[demo]')")
pytestmark = [pytest.mark.torch, pytest.mark.timeout(240)]

DDP = FIXTURES / "ddp_pace.py"
PHASES = FIXTURES / "phases_sync.py"
STEPPING_S = 150  # every rank's first steps: three torch imports and gloo's start on a loaded 2-core machine
FINDING_S = 60  # from then, the finding (issue 32: within 60 s)


def finding(run, rank: int, within: float = FINDING_S) -> dict:
    """The straggler alert once it names `rank`, waited for from the ranks' first steps."""
    wait_for(lambda: all(w["step"] for w in run.status()["workers"]), STEPPING_S, what="every rank stepping")

    def named():
        return next((a for a in run.status()["alerts"] if a["kind"] == "straggler" and a["rank"] == rank
                     and a["straggler"]["lost_s"] > 0), None)
    return wait_for(named, within, interval=0.5, what=f"rank {rank} named the straggler")


def printed(run, rank: int, what: str) -> float:
    """The mean the script printed of its own phase time, its latest line."""
    def line():
        got = re.findall(rf"{what} ([0-9.]+) s", run.log(rank))
        return float(got[-1]) if got else None
    return wait_for(line, 60, what=f"rank {rank}'s own {what} time")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_slow_dataset_is_named_in_every_reader_until_its_rank_catches_up(headless, tmp_path):
    """Rank 2's Dataset is slow until the test says it caught up: named, with its numbers, by the
    status, ctl, Prometheus; then no longer, with its last numbers in the event that ends it and a
    headless line that says so; the summary and the replay say when it began and ended and what it
    cost the run."""
    assert "mpwatch" not in DDP.read_text().split('"""', 2)[2]  # not a line of mpwatch's in the script
    port = free_port()
    caught_up = tmp_path / "caught-up"
    run = headless(DDP, "--slow-rank", 2, "--slow-data", 0.15, "--slow-until", caught_up, n=3,
                   opts=["--metrics-port", port])
    a = finding(run, 2)
    assert re.fullmatch(r"rank 2 is the straggler: its data takes 1\d\d ms against 0\.\d ms on the others, who "
                        r"wait for it in their backward \(each step 1\d\d ms slower\); its data phase waits on its "
                        r"Dataset, loaded in its own process \(no DataLoader workers\)", a["message"]), a["message"]
    found = a["straggler"]
    assert (found["rank"], found["phase"], found["wait_phase"]) == (2, "data", "backward")
    assert found["own_s"] == pytest.approx(printed(run, 2, "data"), rel=0.2)
    st = json.loads(run.ctl("status", "--json").stdout)  # what a user of ctl reads
    assert [x["key"] for x in st["alerts"] if x["kind"] == "straggler"] == ["straggler:2"]
    paces = {w["rank"]: w["pace"] for w in st["workers"]}
    assert paces[2]["relative"]["data"] < 0.05 and all(paces[r]["relative"]["data"] > 0.5 for r in (0, 1))
    metrics = {(s.name, s.labels["rank"], s.labels["phase"]): s.value
               for f in text_string_to_metric_families(urllib.request.urlopen(
                   f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
               for s in f.samples if s.name.startswith(("mpwatch_worker_phase", "mpwatch_worker_relative"))}
    assert metrics[("mpwatch_worker_phase_seconds", "2", "data")] == pytest.approx(found["own_s"], rel=0.2)
    assert metrics[("mpwatch_worker_relative_speed", "2", "data")] < 0.05

    caught_up.touch()  # rank 2's Dataset is as fast as the others' from its next item on
    [ended] = run.wait_event("alert", lambda e: e.get("kind") == "straggler" and e.get("ended"), timeout=90)
    assert ended["rank"] == 2 and ended["key"] == "straggler:2" and ended["straggler"]["phase"] == "data"
    assert ended["straggler"]["lost_s"] >= found["lost_s"]
    assert not [x for x in run.status()["alerts"] if x["kind"] == "straggler"]
    wait_for(lambda: "rank 2: no longer the straggler" in run.stderr_text, 30, what="the headless line")
    run.ctl("stop")
    run.wait_exit(60)
    summary = mpwatch("summary", run.run_dir).stdout
    got = re.search(r"stragglers \(a rank the others waited for at every step\):\n  rank 2 from \+0m\d\ds to "
                    r"\+\dm\d\ds, cost the run ([0-9.]+) (m?s)\n      rank 2 is the straggler: its data", summary)
    assert got, summary
    lost = float(got.group(1)) / (1000 if got.group(2) == "ms" else 1)
    assert lost == pytest.approx(ended["straggler"]["lost_s"], rel=0.05)  # its last numbers, when it ended
    # `mpwatch show`: since when, and its numbers as last said before it ended (said again only when
    # they drift: its first event's, where it ended soon); then gone.
    said = [e for e in run.events("alert") if e.get("key") == "straggler:2" and not e.get("ended")]
    replay = ReplaySource(run.run_dir)
    at = [ts for ts, _ in replay.moments()].index(ended["ts"])
    assert replay.move("seq", at)  # to the event before the one that ended it (seq: its place, from 1)
    [again] = [x for x in replay.status()["alerts"] if x["kind"] == "straggler"]
    assert again["ts"] == pytest.approx(a["ts"], abs=1.0)
    last = said[-1]["straggler"]  # its numbers as its last event said them
    assert [again["straggler"][k] for k in ("phase", "own_s", "lost_s")] == [last[k] for k in ("phase", "own_s", "lost_s")]
    replay.move("end")
    assert not [x for x in replay.status()["alerts"] if x["kind"] == "straggler"]


def test_an_explicit_phase_script_names_the_rank_and_its_compute(headless):
    run = headless(PHASES, "--slow-rank", 1, "--slow-compute", 0.1, n=3)
    a = finding(run, 1)
    assert a["message"].startswith("rank 1 is the straggler: its compute takes 1"), a["message"]
    assert ", who wait for it in their sync (each step " in a["message"]
    assert a["straggler"]["own_s"] == pytest.approx(printed(run, 1, "compute"), rel=0.15)
    assert a["straggler"]["others_s"] == pytest.approx(printed(run, 0, "compute"), rel=0.3)


# ------------------------------------------------------------ short of CPU ----
def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of the process (threads it starts later inherit its main thread's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # a thread that just ended


def lower_priority(pid: int, nice: int) -> None:
    """The process's priority among the others: where the kernel groups a session's processes
    (autogroup: each rank runs in a session of its own), its group's; else its own threads'."""
    group = Path(f"/proc/{pid}/autogroup")
    if group.is_file():
        group.write_text(str(nice))
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), nice)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to put ranks on different ones")
@pytest.mark.timeout(360)
@pytest.mark.takes_cpus
def test_a_rank_whose_core_a_busy_process_shares_is_named_short_of_cpu(headless):
    """Rank 1 and a busy process on CPU 0, rank 1 a lower-priority job than it (on a machine busy
    with other work the kernel would otherwise move that work onto the peers' CPU until every rank
    waits alike), ranks 0 and 2 on CPU 1; not a line of the script slowed: its frozen backbone's
    forward is the CPU work a step. The busy process is itself below everything else (nice 10: it
    takes what the machine leaves of CPU 0, not a core from the tests beside it); rank 1 is at 19."""
    # 240 frozen passes: a forward of ~15 ms a step, so that what rank 1 is denied shows in its step
    # (with 60, ~4 ms of a 45 ms lock-step step, a kernel that gives the niced rank more of CPU 0 than
    # its weight left it no finding at all: seen on this 2-core VM, at 854b30e too)
    run = headless(DDP, "--pace", 0, "--work", 256, "--frozen", 240, n=3)
    wait_for(lambda: all(w["step"] for w in run.status()["workers"]), STEPPING_S, what="every rank stepping")
    pids = {w["rank"]: w["pid"] for w in run.status()["workers"]}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        pin(busy.pid, {0})
        lower_priority(busy.pid, 10)
        pin(pids[1], {0})
        lower_priority(pids[1], 19)
        pin(pids[0], {1})
        pin(pids[2], {1})
        # beside a suite's other lanes on two cores, the peers' CPU is not free either: the margin
        # that names rank 1 takes longer to hold (60 s was missed twice beside four lanes)
        a = finding(run, 1, within=3 * FINDING_S)
    finally:
        busy.send_signal(signal.SIGKILL)
        busy.wait()
    assert a["message"].startswith("rank 1 is the straggler: its forward takes "), a["message"]
    assert ", who wait for it in their backward " in a["message"]
    assert re.search(r"; short of CPU: ready to run but without a CPU \d+% of the time \(CPU \d+%, load [0-9.]+ "
                     r"on \d+ CPUs\)$", a["message"]), a["message"]
    assert a["straggler"]["reason"].startswith("short of CPU")


# ------------------------------------------------------------ a throttled GPU ----
def test_a_slow_forward_on_a_throttled_gpu_names_its_rank_its_forward_and_its_clocks(headless, tmp_path, libnvml):
    """Three GPUs the stand-in libnvidia-ml.so.1 plays under the real nvidia-ml-py, rank 1's held
    back by its power cap (its SM clock 1095 of 1980 MHz); the scripted CUDA view puts each rank
    on its own GPU by UUID; rank 1's forward is 0.2 s slower, as a throttled GPU's would be, its
    peers waiting in their backward. (One run for both: the slow forward on the CPU alone was a
    second 3-rank run of the same script.)"""
    gib = 1 << 30
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i:04d}", "mem_total": 80 * gib} for i in range(3)]
    frame = {"gpus": [{"util_gpu": 97, "sm_clock": 1095 if i == 1 else 1980, "sm_clock_max": 1980,
                       "throttle": ["sw_power_cap"] if i == 1 else [],
                       "processes": [{"pid": f"rank:{i}", "mem": 10 * gib}]} for i in range(3)]}
    env = gpu_env(libnvml, tmp_path, {"gpus": gpus, "frames": [frame]},
                  cuda={str(i): [view(f"GPU-{i:04d}", 8 * gib, 9 * gib)] for i in range(3)})
    run = headless(DDP, "--slow-rank", 1, "--slow-forward", 0.2, n=3, opts=FAST, env=env)
    a = finding(run, 1)
    found = a["straggler"]
    # the words say the finding's numbers (cost: 0.2 s give or take the run's noise, so its
    # hundreds may be 1 or 2: the number is held to the script's own, not to a pattern)
    assert a["message"] == (f"rank 1 is the straggler: its forward takes {fmt.span(found['own_s'])} against "
                            f"{fmt.span(found['others_s'])} on the others, who wait for it in their backward "
                            f"(each step {fmt.span(found['cost_s'])} slower); its GPU 1 is throttled: sw power cap "
                            "(SM clock 1095 of 1980 MHz)"), a["message"]
    own, others = printed(run, 1, "forward"), printed(run, 0, "forward")
    assert found["own_s"] == pytest.approx(own, rel=0.15)
    assert found["others_s"] == pytest.approx(others, rel=0.3)
    assert found["cost_s"] == pytest.approx(own - others, rel=0.15)  # each step: the forward's own extra time
    assert a["straggler"]["reason"] == "its GPU 1 is throttled: sw power cap (SM clock 1095 of 1980 MHz)"
    paces = {w["rank"]: w["pace"] for w in run.status()["workers"]}
    assert paces[0]["why"] is None and paces[2]["why"] is None  # their GPUs run at their full clock
