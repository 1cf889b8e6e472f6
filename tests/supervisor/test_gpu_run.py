"""GPU watching in real headless runs: the stand-in libnvidia-ml.so.1 (testing.libnvml, under
the real nvidia-ml-py) plays the scenario in place of the driver, and the scripted allocator
view (MPWATCH_SCRIPTED_CUDA) stands in for torch's CUDA view; everything else (workers, pids,
children, psutil, the control socket, gpu.jsonl) is real."""
import ctypes
import json
import os

import psutil
import pytest

from mpwatch.rundir.textfiles import read_jsonl
from mpwatch.sources.local import Client
from tests.helpers import FIXTURES, mpwatch, wait_for
from tests.libnvml import nvml_env

GiB = 1 << 30
REPORTER = FIXTURES / "reporter.py"
FAST = ["--gpu-interval", "0.1"]


def nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


def gpu_env(lib, tmp_path, data, cuda=None, **extra) -> dict:
    env = nvml_env(lib, tmp_path, data, base=dict(os.environ, SLEEP="0.2", **extra))
    if cuda is not None:
        cpath = tmp_path / "cuda-scenario.json"
        cpath.write_text(json.dumps({"ranks": cuda}))
        env["MPWATCH_SCRIPTED_CUDA"] = str(cpath)
    return env


def view(uuid, allocated, reserved, device=0, **extra) -> dict:
    return {"device": device, "uuid": uuid, "allocated": allocated, "reserved": reserved,
            "max_allocated": allocated, **extra}


def gpu_lines(run) -> list[dict]:
    """gpu.jsonl's records so far (a line the supervisor is writing now is not one yet)."""
    return list(read_jsonl(run.run_dir / "gpu.jsonl"))


def gpu0(run) -> dict | None:
    gpus = run.status()["gpus"]
    return gpus[0] if gpus else None


def alert_kinds(g) -> set:
    return {a["kind"] for a in (g or {}).get("alerts", [])}


def unused_pid() -> int:
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1  # never a live pid here: as a pid from another namespace looks


def test_two_ranks_and_outsiders_on_one_gpu(headless, tmp_path, libnvml):
    ghost = unused_pid()
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"name": "Fake 10G", "mem_total": 10 * GiB}], "frames": [{"gpus": [
        {"util_gpu": 70, "util_mem": 20, "temperature": 55, "power_w": 200,
         "processes": [{"pid": "rank:0", "mem": 2 * GiB}, {"pid": "rank:1", "mem": GiB},
                       {"pid": "parent", "mem": GiB // 2}, {"pid": ghost, "mem": GiB}]}]}]})
    run = headless(REPORTER, "100000", n=2, opts=FAST, env=env)
    g = wait_for(lambda: (lambda g: g if {"contention", "outside"} <= alert_kinds(g) and
                          len(g["processes"]) == 4 and all(p["rank"] is not None or p["pid"] in (os.getpid(), ghost)
                                                           for p in g["processes"]) else None)(gpu0(run)),
                 timeout=60, what="contention and outsider alerts")
    assert (g["name"], g["mem_total"], g["util_gpu"], g["temperature"], g["power_w"]) == ("Fake 10G", 10 * GiB, 70,
                                                                                          55, 200.0)
    by_pid = {p["pid"]: p for p in g["processes"]}
    me = by_pid[os.getpid()]  # the supervisor's parent is this test process: an outsider
    # named by its command line (pytest's, or an xdist lane's: `python -c ...`)
    assert me["rank"] is None and me["visible"] and me["user"] and me["cmd"].startswith(psutil.Process().cmdline()[0])
    assert by_pid[ghost]["visible"] is False and by_pid[ghost]["cmd"] == "not visible"
    contention = next(a for a in g["alerts"] if a["kind"] == "contention")
    assert contention["ranks"] == [0, 1] and "ranks 0 and 1 share this GPU" in contention["message"]
    outside = {a["pid"]: a for a in g["alerts"] if a["kind"] == "outside"}
    assert set(outside) == {os.getpid(), ghost} and outside[os.getpid()]["mem_bytes"] == GiB // 2

    st = run.status()
    views = {w["rank"]: w["gpu"] for w in st["workers"]}
    assert views[0]["index"] == 0 and views[0]["mem_bytes"] == 2 * GiB
    assert views[1]["index"] == 0 and views[1]["mem_bytes"] == GiB

    # Alerts are announced when they start, not on every tick: let several process
    # queries pass, then count.
    first = g["processes_ts"]
    wait_for(lambda: gpu0(run)["processes_ts"] > first + 1.0, timeout=60, what="more process queries")
    events = run.events("gpu_alert")
    assert len([e for e in events if e["kind"] == "contention" and e["ranks"] == [0, 1]]) == 1
    assert len([e for e in events if e["kind"] == "outside" and e["pid"] == ghost]) == 1
    assert all(e["gpu"] == 0 and e["message"] for e in events)

    text = run.ctl("status").stdout
    assert "GPU 0: Fake 10G · mem" in text and "! GPU 0: ranks 0 and 1 share this GPU" in text
    assert "not visible" in text


def test_memory_high_names_the_rank_that_grows_fastest(headless, tmp_path, libnvml):
    frames = [{"at": t, "gpus": [{"util_gpu": 90, "processes": [{"pid": "rank:0", "mem": 5 * GiB},
                                                                   {"pid": "rank:1", "mem": r1}]}]}
              for t, r1 in ((0, 1 * GiB), (1.5, 2 * GiB), (3, 3 * GiB), (4.5, 3.5 * GiB), (6, 4.2 * GiB))]
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"mem_total": 10 * GiB}], "frames": frames},
                   MPWATCH_GPU_GROWTH_WINDOW_S="3")
    run = headless(REPORTER, "100000", n=2, opts=FAST, env=env)
    (ev,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "memory_high", timeout=60)
    # It fills at about 0.6 GiB/s: said before it crosses 90%, with the time to full.
    assert ev["rank"] == 1 and ev["gpu"] == 0 and ev["fraction"] > 0.5 and ev["severity"] == "error"
    assert "rank 1 grows fastest" in ev["message"] and ev["time_to_full_s"] < 120 and "full in" in ev["message"]
    assert ev["hint"] and ev["short"].startswith("full in")
    # Once it stops growing at 92% the alert stands on, as memory above the threshold.
    wait_for(lambda: "memory_high" in alert_kinds(gpu0(run)) and gpu0(run)["mem_used"] > 9 * GiB, timeout=60,
             what="memory_high standing at 92%")


def test_a_worker_dying_of_cuda_oom_raises_the_oom_alert(headless, tmp_path, libnvml):
    go = tmp_path / "go"
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"mem_total": 10 * GiB}], "frames": [{"gpus": [
        {"processes": [{"pid": "rank:0", "mem": 6 * GiB}, {"pid": "rank:1", "mem": GiB},
                       {"pid": "parent", "mem": 2 * GiB}]}]}]})
    run = headless(FIXTURES / "gpu_oom.py", go, n=2, opts=FAST, env=env)
    # Die only once the poller has seen rank 0 on the GPU, as a real OOM happens mid-run.
    # Both ranks must be on the sample the alert reports (rank 1 may start late on a busy box).
    wait_for(lambda: run.worker(0)["gpu"] and run.worker(1)["gpu"], timeout=60, what="ranks 0 and 1 seen on GPU 0")
    go.write_text("")
    (ev,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "oom", timeout=60)
    m = ev["message"]
    assert ev["rank"] == 0 and ev["gpu"] == 0
    assert m.startswith("rank 0 died of CUDA out of memory on GPU 0") and "9.0 GiB of 10.0 GiB used" in m
    assert "rank 1 1.0 GiB" in m and f"pid {os.getpid()}" in m and "tried to allocate 2.00 GiB" in m
    g = wait_for(lambda: (lambda g: g if "oom" in alert_kinds(g) else None)(gpu0(run)), timeout=30,
                 what="the OOM alert in gpus[0].alerts")
    assert next(a for a in g["alerts"] if a["kind"] == "oom")["rank"] == 0
    assert run.worker(0)["state"] == "failed"


def test_low_use_while_running_hints_the_batch_could_grow(headless, tmp_path, libnvml):
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"mem_total": 80 * GiB}], "frames": [{"gpus": [
        {"util_gpu": 4, "processes": [{"pid": "rank:0", "mem": 3 * GiB}]}]}]}, MPWATCH_GPU_IDLE_S="1")
    run = headless(REPORTER, "100000", n=1, opts=FAST, env=env)
    (ev,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "idle", timeout=60)
    assert "batch size could probably grow" in ev["message"] and "rank 0 runs on it" in ev["message"]


def test_failing_nvml_calls_are_na_and_the_poller_goes_on(headless, tmp_path, libnvml):
    # Temperature always fails; the process query fails for the first 2 s, then works.
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"mem_total": 10 * GiB}], "frames": [
        {"at": 0, "gpus": [{"util_gpu": 33, "fail": ["temperature", "processes"]}]},
        {"at": 2, "gpus": [{"util_gpu": 33, "fail": ["temperature"],
                            "processes": [{"pid": "rank:0", "mem": GiB}]}]}]})
    run = headless(REPORTER, "100000", n=1, opts=FAST, env=env)
    g = wait_for(lambda: (lambda g: g if g and "temperature" in g["errors"] else None)(gpu0(run)),
                 timeout=60, what="a failing temperature call")
    assert g["temperature"] is None and g["mem_total"] == 10 * GiB and g["util_gpu"] == 33
    # NVML_ERROR_UNKNOWN, in plain words (NVML's own name for it, "Unknown Error", tells nothing)
    assert g["errors"]["temperature"] == "the driver failed without saying why"
    line = next(x for x in run.ctl("status").stdout.splitlines() if x.startswith("GPU 0:"))
    assert " · N/A · " in line and "util 33%" in line
    # The process list only exists after the failing queries: the poller kept going.
    wait_for(lambda: run.worker(0)["gpu"], timeout=60, what="the process list after the failures")
    g = gpu0(run)
    assert g["temperature"] is None and "processes" not in g["errors"]
    assert g["processes"][0]["rank"] == 0


def test_without_nvml_the_gpu_line_is_clear_and_the_run_goes_on(headless, tmp_path):
    if nvml_present():
        pytest.skip("this machine has an NVIDIA driver")
    env = {k: v for k, v in os.environ.items() if k != "MPWATCH_SCRIPTED_NVML"}
    run = headless(REPORTER, "100000", n=1, opts=FAST, env=dict(env, SLEEP="0.2"))
    st = wait_for(lambda: (lambda s: s if s["gpu_status"] else None)(run.status()), timeout=60,
                  what="the GPU status line")
    assert st["gpu_status"].startswith("NVML library not found") and st["gpus"] == []
    assert st["workers"][0]["gpu"] is None
    res = mpwatch("ctl", "--run", run.run_dir, "status")
    assert res.returncode == 0 and "GPU: NVML library not found" in res.stdout
    assert "Traceback" not in res.stderr + run.stderr_text
    run.wait_event("report", timeout=60)  # everything else works


def test_a_driver_that_fails_to_start_is_a_status_line_not_a_crash(headless, tmp_path, libnvml):
    env = gpu_env(libnvml, tmp_path, {"gpus": [{}], "init_error": "LIB_RM_VERSION_MISMATCH"})
    run = headless(REPORTER, "100000", n=1, opts=FAST, env=env)
    st = wait_for(lambda: (lambda s: s if s["gpu_status"] else None)(run.status()), timeout=60,
                  what="the GPU status line")
    assert st["gpu_status"].startswith("driver/bindings mismatch: the NVML library and the loaded kernel driver")
    assert st["gpus"] == [] and "Traceback" not in run.stderr_text
    run.wait_event("report", timeout=60)  # everything else works


def test_ranks_on_their_own_gpus_by_uuid_children_strays_and_the_timeline(headless, tmp_path, libnvml):
    """Two GPUs. Ranks 0 and 1 both run on NVML's GPU 1, which torch calls device 0
    (CUDA_VISIBLE_DEVICES); rank 2 runs on GPU 0 with a child there, and left a stray
    context on GPU 1; this test process holds 6 GiB of GPU 0; GPU 1 has no process samples."""
    cap = 4096
    env = gpu_env(libnvml, tmp_path, {
        "gpus": [{"name": "Fake A", "mem_total": 80 * GiB, "uuid": "GPU-aaaa"},
                 {"name": "Fake B", "mem_total": 80 * GiB, "uuid": "GPU-bbbb"}],
        "frames": [{"gpus": [
            {"util_gpu": 60, "processes": [{"pid": "rank:2", "mem": 8 * GiB, "sm": 40},
                                           {"pid": "rank:2/child", "mem": GiB, "sm": 10},
                                           {"pid": "parent", "mem": 6 * GiB, "sm": 5}]},
            {"util_gpu": 93, "proc_util": False, "processes": [
                {"pid": "rank:0", "mem": 20 * GiB}, {"pid": "rank:1", "mem": 18 * GiB},
                {"pid": "rank:2", "mem": GiB // 2}]}]}]},
        cuda={"0": [view("GPU-bbbb", 15 * GiB, 18 * GiB)], "1": [view("GPU-bbbb", 12 * GiB, 16 * GiB)],
              "2": [view("GPU-aaaa", 6 * GiB, 7 * GiB)]},
        MPWATCH_GPU_TIMELINE_MB=str(cap / 2**20))
    run = headless(FIXTURES / "gpu_child.py", n=3, opts=FAST, env=env)

    def ready():
        st = run.status()
        ws = {w["rank"]: w for w in st["workers"]}
        kinds = {a["kind"] for g in st["gpus"] for a in g["alerts"]}
        # Settled: every CUDA view has reached the poller (until then a rank is placed by pid).
        ok = len(ws) == 3 and all(ws[r]["gpu"] and ws[r]["gpu"]["mapped_by"] == "uuid" for r in ws) \
            and ws[2]["gpu"]["mem_bytes"] == 9 * GiB
        return st if ok and {"contention", "stray_context", "outside"} <= kinds else None
    st = wait_for(ready, timeout=90, what="every rank placed, with its child, and the three alerts")
    ws = {w["rank"]: w for w in st["workers"]}
    for r in (0, 1):
        assert ws[r]["cuda"]["device"] == 0 and ws[r]["cuda"]["uuid"] == "GPU-bbbb"
        assert (ws[r]["gpu"]["index"], ws[r]["gpu"]["uuid"]) == (1, "GPU-bbbb")  # torch's device 0
        assert ws[r]["gpu"]["sm_util"] is None  # GPU 1 has no process samples: N/A, not 0
    assert ws[0]["gpu"]["shared_with"] == [1] and ws[0]["gpu"]["other_bytes"] == 2 * GiB
    w2 = ws[2]["gpu"]
    assert (w2["index"], w2["mem_bytes"], w2["sm_util"], w2["shared_with"]) == (0, 9 * GiB, 50, [])
    assert w2["gpus"] == [{"index": 0, "mem_bytes": 9 * GiB}, {"index": 1, "mem_bytes": GiB // 2}]
    g0, g1 = st["gpus"]
    assert (g0["uuid"], g0["ranks"], g1["ranks"]) == ("GPU-aaaa", [2], [0, 1])
    child = next(p for p in g0["processes"] if p["child_of"] == 2)
    assert child["rank"] is None and child["sm_util"] == 10 and child["since"] <= g0["ts"]
    assert all(p["sm_util"] is None for p in g1["processes"]) and "proc_util" in g1["errors"]
    assert g0["breakdown"] == {"allocated": 6 * GiB, "cached": GiB, "other": 2 * GiB, "outside": 6 * GiB}
    assert g1["history"]["util_gpu"][-1] == 93 and len(g1["history"]["mem_used"]) >= 1
    by_kind = {a["kind"]: a for g in st["gpus"] for a in g["alerts"]}
    # Three ranks for two GPUs: some sharing is forced, so a warning (an error when avoidable).
    assert by_kind["contention"]["gpu"] == 1 and by_kind["contention"]["severity"] == "warning"
    assert (by_kind["stray_context"]["rank"], by_kind["stray_context"]["gpu"]) == (2, 1)
    assert by_kind["outside"]["pid"] == os.getpid() and by_kind["outside"]["gpu"] == 0
    assert all(a["hint"] and a["short"] and a["severity"] for a in by_kind.values())

    # The gpu_timeline command: ticks with every rank on its GPU, and the marks.
    # The timeline keeps one tick a second: wait for one taken after the settled status above.
    with Client.at(run.run_dir) as c:
        tl = wait_for(lambda: (lambda t: t if t["ticks"] and t["ticks"][-1]["ts"] > g0["ts"] else None)(
            c.gpu_timeline(120)), timeout=30, what="a timeline tick after the status")
        with pytest.raises(Exception, match="window"):
            c.gpu_timeline(-5)
    last = tl["ticks"][-1]
    assert {(r["rank"], r["gpu"]) for r in last["ranks"]} == {(0, 1), (1, 1), (2, 0)}
    assert next(r for r in last["ranks"] if r["rank"] == 2)["nvml"] == 9 * GiB
    assert [g["outside"] for g in last["gpus"]] == [6 * GiB, 0]
    marks = {m["kind"] for m in tl["marks"]}
    assert {"proc_started", "alert"} <= marks

    # gpu.jsonl: ticks and marks, thinned under its 4 KiB cap, and saying so.
    recs = wait_for(lambda: (lambda ls: ls if any("thinned" in x for x in ls) else None)(gpu_lines(run)),
                    timeout=90, what="gpu.jsonl thinned under its cap")
    assert any("gpus" in x for x in recs) and any(x.get("kind") == "alert" for x in recs)
    assert (run.run_dir / "gpu.jsonl").stat().st_size <= cap + 2048  # at most a line past the cap


def test_allocator_counters_fragmentation_and_a_caught_oom(headless, tmp_path, libnvml):
    full = {"processes": [{"pid": "rank:0", "mem": 76 * GiB}]}
    cv = view("GPU-aaaa", 40 * GiB, 74 * GiB, inactive_split=12 * GiB)
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"mem_total": 80 * GiB, "uuid": "GPU-aaaa"}],
                                       "frames": [{"gpus": [full]}]},
                   cuda={"0": [dict(cv, at=0), {"at": 2, "alloc_retries": 5}, {"at": 3, "num_ooms": 1}]})
    run = headless(REPORTER, "100000", n=1, opts=FAST, env=env)
    want = {"memory_high", "fragmentation", "alloc_retries", "oom"}
    evs = wait_for(lambda: (lambda es: es if want <= {e["kind"] for e in es} else None)(run.events("gpu_alert")),
                   timeout=90, what="the memory, fragmentation, retry and OOM alerts")
    by_kind = {e["kind"]: e for e in evs}
    assert by_kind["alloc_retries"]["rank"] == 0 and "retried 5 times" in by_kind["alloc_retries"]["message"]
    assert by_kind["oom"]["severity"] == "error" and "went on" in by_kind["oom"]["message"]
    assert "expandable_segments" in by_kind["fragmentation"]["hint"]
    assert by_kind["memory_high"]["fraction"] == 0.95 and by_kind["memory_high"]["severity"] == "warning"
    wg = run.worker(0)["gpu"]
    assert (wg["alloc_retries"], wg["ooms"], wg["peak"], wg["fragmentation"]) == (5, 1, 40 * GiB, 34 * GiB)
    kinds = wait_for(lambda: (lambda k: k if {"alloc_retry", "oom"} <= k else None)(
        {x.get("kind") for x in gpu_lines(run)}), timeout=30, what="the retry and OOM marks in gpu.jsonl")
    assert "alert" in kinds


def test_a_gpu_idle_while_the_others_work(headless, tmp_path, libnvml):
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"mem_total": 80 * GiB}, {"mem_total": 80 * GiB}], "frames": [{"gpus": [
        {"util_gpu": 93, "processes": [{"pid": "rank:0", "mem": 20 * GiB}, {"pid": "rank:1", "mem": 20 * GiB}]},
        {"util_gpu": 0, "processes": []}]}]}, MPWATCH_GPU_IDLE_S="1")
    run = headless(REPORTER, "100000", n=2, opts=FAST, env=env)
    (ev,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "idle", timeout=60)
    assert ev["gpu"] == 1 and "GPU 0 at 93% (ranks 0 and 1)" in ev["message"] and "set_device" in ev["hint"]


def test_memory_the_driver_cannot_tell_is_na_not_16_eib(headless, tmp_path, libnvml):
    # NVML_VALUE_NOT_AVAILABLE (2**64 - 1) for rank 0's process, as under WDDM or some vGPUs.
    env = gpu_env(libnvml, tmp_path, {"gpus": [{"mem_total": 10 * GiB}], "frames": [{"gpus": [
        {"mem_used": 3 * GiB, "processes": [{"pid": "rank:0", "mem": None}, {"pid": "parent", "mem": GiB}]}]}]})
    run = headless(REPORTER, "100000", n=1, opts=FAST, env=env)
    # The stand-in lists rank 0's process from its exec on (a driver, once it made a CUDA context:
    # seconds later), so a first sample may come before the supervisor has its pid: wait for both.
    g = wait_for(lambda: (lambda g: g if g and len(g["processes"]) == 2
                          and any(p["rank"] == 0 for p in g["processes"]) else None)(gpu0(run)), timeout=60,
                 what="both processes on GPU 0, rank 0's named")
    by_pid = {p["pid"]: p for p in g["processes"]}
    rank0 = next(p for p in g["processes"] if p["rank"] == 0)
    assert rank0["mem_bytes"] is None and by_pid[os.getpid()]["mem_bytes"] == GiB
    assert g["mem_used"] == 3 * GiB
    wg = wait_for(lambda: run.worker(0)["gpu"], timeout=60, what="rank 0 placed on GPU 0")
    assert (wg["index"], wg["mem_bytes"], wg["other_bytes"]) == (0, None, None)
    lines = run.ctl("status").stdout.splitlines()
    assert f"    pid {rank0['pid']:>7}       N/A  rank 0" in lines  # never 16.0E
def test_in_a_container_ranks_are_placed_by_their_cuda_view_and_nobody_is_an_outsider(headless, tmp_path, libnvml):
    """Issue 20: NVML lists the ranks' processes under the host's pids, none of them a pid
    here (a PID namespace), while each rank's torch says it holds memory on its GPU (UUID)."""
    host = unused_pid()
    env = gpu_env(libnvml, tmp_path, {
        "gpus": [{"name": "Fake A", "mem_total": 80 * GiB, "uuid": "GPU-aaaa"},
                 {"name": "Fake B", "mem_total": 80 * GiB, "uuid": "GPU-bbbb"}],
        "frames": [{"gpus": [{"util_gpu": 90, "processes": [{"pid": host, "mem": 20 * GiB}]},
                             {"util_gpu": 88, "processes": [{"pid": host + 1, "mem": 18 * GiB}]}]}]},
        cuda={"0": [view("GPU-aaaa", 15 * GiB, 18 * GiB)], "1": [view("GPU-bbbb", 12 * GiB, 16 * GiB)]})
    run = headless(REPORTER, "100000", n=2, opts=FAST, env=env)
    st = wait_for(lambda: (lambda st: st if all(w["gpu"] and w["gpu"]["index"] is not None for w in st["workers"])
                           and all(g["processes"] for g in st["gpus"]) else None)(run.status()), 60,
                  what="both ranks placed and both process lists")
    assert st["gpu_status"].startswith("GPU pids not visible from this container")
    ws = {w["rank"]: w["gpu"] for w in st["workers"]}
    assert (ws[0]["index"], ws[0]["mapped_by"], ws[1]["index"], ws[1]["mapped_by"]) == (0, "uuid", 1, "uuid")
    assert ws[0]["mem_bytes"] is None and ws[0]["reserved"] == 18 * GiB  # NVML cannot tell; torch can
    for g in st["gpus"]:
        assert [p["visible"] for p in g["processes"]] == [False] and g["breakdown"]["outside"] is None
        assert not [a for a in g["alerts"] if a["kind"] == "outside"], g["alerts"]
    first = st["gpus"][0]["processes_ts"]
    wait_for(lambda: run.status()["gpus"][0]["processes_ts"] > first + 1.0, 60, what="more process queries")
    assert not [e for e in run.events("gpu_alert") if e["kind"] == "outside"]
    assert "GPU pids not visible from this container" in run.ctl("status").stdout
