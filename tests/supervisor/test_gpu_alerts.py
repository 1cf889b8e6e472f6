"""The GPU alert decisions and the per-rank mapping. The views are never written by hand:
a GpuWatch on a scripted NVML, with real processes standing for the ranks, builds them
with its own code (tests/supervisor/gpu_rig.py); the decisions are then checked on
what it publishes, and called directly on those same views where a threshold is probed."""
import pytest

from mpwatch.supervisor.gpu import alerts, rank_alerts
from tests.supervisor.gpu_rig import GiB, MiB, cuda, rigs

TWO = [{"name": "Fake A", "mem_total": 80 * GiB, "uuid": "GPU-aaaa"},
       {"name": "Fake B", "mem_total": 80 * GiB, "uuid": "GPU-bbbb"}]


@pytest.fixture
def rig(tmp_path):
    yield from rigs(tmp_path)


def frames(*gpus, at=0):
    return {"at": at, "gpus": list(gpus)}


# ------------------------------------------------------------- rank mapping ----
def test_a_rank_is_mapped_by_the_uuid_of_its_cuda_view_not_torchs_index(rig):
    # Under CUDA_VISIBLE_DEVICES=1 torch calls NVML's GPU 1 "device 0".
    r = rig({"gpus": TWO, "frames": [frames({"processes": []},
                                            {"util_gpu": 80, "processes": [{"pid": "rank:0", "mem": 5 * GiB}]})]},
            ranks=1)
    r.cuda[0] = cuda("GPU-bbbb", 3 * GiB, 4 * GiB, device=0)
    r.tick()
    wg = r.watch.worker_gpu(0)
    assert (wg["index"], wg["uuid"], wg["mapped_by"]) == (1, "GPU-bbbb", "uuid")
    assert wg["mem_bytes"] == 5 * GiB and wg["gpus"] == [{"index": 1, "mem_bytes": 5 * GiB}]
    assert (wg["allocated"], wg["reserved"], wg["other_bytes"], wg["fragmentation"]) == (3 * GiB, 4 * GiB, GiB, GiB)
    assert r.gpu(1)["ranks"] == [0] and r.gpu(0)["ranks"] == [] and r.gpu(1)["uuid"] == "GPU-bbbb"


def test_without_a_known_uuid_a_rank_is_mapped_by_where_its_processes_hold_most(rig):
    r = rig({"gpus": TWO, "frames": [frames({"processes": [{"pid": "rank:0", "mem": GiB}]},
                                            {"processes": [{"pid": "rank:0", "mem": 6 * GiB}]})]}, ranks=1)
    r.cuda[0] = cuda("GPU-unknown", GiB, GiB)  # a UUID NVML does not list: the pids decide
    r.tick()
    wg = r.watch.worker_gpu(0)
    assert (wg["index"], wg["mapped_by"], wg["mem_bytes"]) == (1, "pid", 6 * GiB)
    assert wg["gpus"] == [{"index": 0, "mem_bytes": GiB}, {"index": 1, "mem_bytes": 6 * GiB}]


def test_a_childs_memory_counts_as_its_ranks(rig):
    r = rig({"gpus": TWO[:1], "frames": [frames({"processes": [{"pid": "rank:0", "mem": 2 * GiB, "sm": 30},
                                                               {"pid": "rank:0/child", "mem": GiB, "sm": 20}]})]},
            ranks=1, child=True)
    r.tick()
    child = next(p for p in r.gpu(0)["processes"] if p["pid"] == r.child(0))
    assert child["child_of"] == 0 and child["rank"] is None  # found through psutil: the sampler had not seen it
    wg = r.watch.worker_gpu(0)
    assert wg["mem_bytes"] == 3 * GiB and wg["sm_util"] == 50 and wg["mapped_by"] == "pid"
    assert alerts.contention(r.gpu(0), False) is None


def test_process_sm_utilization_and_its_absence(rig):
    r = rig({"gpus": TWO, "frames": [frames(
        {"processes": [{"pid": "rank:0", "mem": GiB, "sm": 61}, {"pid": "parent", "mem": GiB}]},
        {"proc_util": False, "processes": [{"pid": "rank:1", "mem": GiB, "sm": 50}]})]})
    r.tick()
    g0, g1 = r.gpu(0), r.gpu(1)
    by_pid = {p["pid"]: p for p in g0["processes"]}
    assert by_pid[r.pid(0)]["sm_util"] == 61 and next(p for p in by_pid.values() if p["rank"] is None)["sm_util"] == 0
    assert g1["processes"][0]["sm_util"] is None and "not supported" in g1["errors"]["proc_util"]
    assert r.watch.worker_gpu(0)["sm_util"] == 61 and r.watch.worker_gpu(1)["sm_util"] is None
    assert all(isinstance(p["since"], float) for p in g0["processes"])


def test_breakdown_and_history(rig):
    r = rig({"gpus": TWO[:1], "frames": [frames({"util_gpu": 50, "extra_used": GiB, "processes": [
        {"pid": "rank:0", "mem": 10 * GiB}, {"pid": "rank:1", "mem": 8 * GiB}, {"pid": "parent", "mem": 3 * GiB}]})]})
    r.cuda[0] = cuda("GPU-aaaa", 6 * GiB, 9 * GiB)
    r.tick()
    assert r.gpu(0)["breakdown"] == {"allocated": None, "cached": None, "other": 18 * GiB, "outside": 3 * GiB}
    r.cuda[1] = cuda("GPU-aaaa", 4 * GiB, 5 * GiB)
    r.tick(n=130)
    g = r.gpu(0)
    assert g["breakdown"] == {"allocated": 10 * GiB, "cached": 4 * GiB, "other": 4 * GiB, "outside": 3 * GiB}
    assert len(g["history"]["mem_used"]) == 120 and set(g["history"]["mem_used"]) == {22 * GiB}
    assert set(g["history"]["util_gpu"]) == {50}


# ----------------------------------------------------------------- alerts ----
def test_two_ranks_whose_own_gpu_is_one_is_contention_an_error_unless_forced(rig):
    r = rig({"gpus": TWO, "frames": [frames({"util_gpu": 93, "processes": [
        {"pid": "rank:0", "mem": 20 * GiB}, {"pid": "rank:1", "mem": 18 * GiB}]}, {"processes": []})]})
    r.cuda = {0: cuda("GPU-aaaa", GiB, GiB), 1: cuda("GPU-aaaa", GiB, GiB, device=1)}
    r.tick()
    (a,) = r.alerts("contention")
    assert a["ranks"] == [0, 1] and a["severity"] == "error" and a["short"] == "2 ranks share"
    assert "ranks 0 and 1 share this GPU at 93% utilization" in a["message"] and "set_device" in a["hint"]
    assert r.watch.worker_gpu(0)["shared_with"] == [1] and r.watch.worker_gpu(1)["shared_with"] == [0]
    # With one GPU for two ranks, sharing is forced: a warning.
    assert alerts.contention(r.gpu(0), forced=True)["severity"] == "warning"


def test_memory_on_a_gpu_that_is_not_the_ranks_own_is_a_stray_context(rig):
    r = rig({"gpus": TWO, "frames": [frames(
        {"processes": [{"pid": "rank:0", "mem": 10 * GiB}, {"pid": "rank:1", "mem": 500 * MiB}]},
        {"processes": [{"pid": "rank:1", "mem": 10 * GiB}]})]})
    r.cuda = {0: cuda("GPU-aaaa", GiB, GiB), 1: cuda("GPU-bbbb", GiB, GiB)}
    r.tick()
    (a,) = r.alerts("stray_context")
    assert (a["rank"], a["gpu"], a["mem_bytes"]) == (1, 0, 500 * MiB)
    assert "rank 1 holds 500.0 MiB on GPU 0, which is not its own (GPU 1)" in a["message"]
    assert "set_device" in a["hint"] and a in r.gpu(0)["alerts"]
    assert not r.alerts("contention")  # rank 1's own GPU is GPU 1
    wg = r.watch.worker_gpu(1)
    wg["gpus"][0]["mem_bytes"] = 6 * GiB  # as much as half its own: a spawned trainer's work, not a stray
    assert rank_alerts.stray_contexts(1, wg) == []


def test_an_outside_process_counts_from_its_share_of_the_gpu(rig):
    r = rig({"gpus": TWO[:1], "frames": [frames({"processes": [
        {"pid": "rank:0", "mem": 10 * GiB}, {"pid": "parent", "mem": 4 * GiB}, {"pid": "self", "mem": 3 * GiB}]})]},
            ranks=1)
    r.tick()
    (a,) = r.alerts("outside")  # 4 GiB of 80 is 5%: in; 3 GiB is under the threshold
    assert a["fraction"] == 0.05 and a["user"] and "(5%)" in a["message"] and a["short"] == "outside 4.0G"
    g = r.gpu(0)
    assert len(alerts.outsiders(g, alerts.AlertConfig(outside=0.03))) == 2
    assert alerts.outsiders(g, alerts.AlertConfig(outside=0.10)) == []


def test_memory_pressure_says_when_the_gpu_is_full_at_the_current_slope(rig):
    grow = [frames({"processes": [{"pid": "rank:0", "mem": 30 * GiB}, {"pid": "rank:1", "mem": (30 + t // 2) * GiB}]},
                   at=t) for t in range(0, 40)]
    r = rig({"gpus": TWO[:1], "frames": grow}, cfg=alerts.AlertConfig(growth_window_s=20))
    r.tick(n=15)
    assert not r.alerts("memory_high")  # 84% and growing, but not for a whole window yet
    r.tick(n=6)  # 20 s of steady growth: +0.5 GiB/s with 10 GiB left
    (a,) = r.alerts("memory_high")
    assert a["rank"] == 1 and a["severity"] == "error" and a["time_to_full_s"] == pytest.approx(20.0, abs=4.0)
    assert "rank 1 grows fastest" in a["message"] and "full in" in a["message"] and a["short"].startswith("full in")


def test_a_start_up_ramp_is_not_a_leak(rig):
    ramp = [frames({"processes": [{"pid": "rank:0", "mem": min(8 * t, 60) * GiB}]}, at=t) for t in range(0, 10)]
    r = rig({"gpus": TWO[:1], "frames": ramp}, ranks=1)
    for _ in range(90):
        r.tick()
        assert not r.alerts("memory_high")  # 60 GiB of 80 in 8 s, then flat


def test_memory_above_the_threshold_without_growth_is_a_warning(rig):
    r = rig({"gpus": TWO[:1], "frames": [frames({"processes": [{"pid": "rank:0", "mem": 40 * GiB},
                                                               {"pid": "rank:1", "mem": 34 * GiB}]})]})
    r.tick(n=5)
    (a,) = r.alerts("memory_high")
    assert a["severity"] == "warning" and a["rank"] == 0 and "holds the most" in a["message"]
    assert a["short"] == "mem 92%" and a["time_to_full_s"] is None
    assert alerts.memory_high(r.gpu(0), {}, None, alerts.AlertConfig(mem_high=0.95)) is None


def test_allocator_retries_rising_and_a_caught_oom(rig):
    r = rig({"gpus": TWO[:1], "frames": [frames({"processes": [{"pid": "rank:0", "mem": 20 * GiB}]})]}, ranks=1)
    r.cuda[0] = cuda("GPU-aaaa", 10 * GiB, 18 * GiB, alloc_retries=4)
    r.tick(n=3)
    assert not r.alerts("alloc_retries")  # retries from before: not rising
    r.cuda[0] = cuda("GPU-aaaa", 10 * GiB, 18 * GiB, alloc_retries=7)
    r.tick()
    (a,) = r.alerts("alloc_retries")
    assert a["rank"] == 0 and "retried 3 times" in a["message"] and "(7 in all)" in a["message"]
    r.tick(n=70)  # no new retry within the window: it ends
    assert not r.alerts("alloc_retries")
    r.cuda[0] = cuda("GPU-aaaa", 10 * GiB, 18 * GiB, alloc_retries=7, num_ooms=1)
    r.tick()
    (o,) = r.alerts("oom")
    assert o["severity"] == "error" and "rank 0 hit CUDA out of memory on GPU 0 and went on" in o["message"]
    kinds = [m["kind"] for m in r.watch.timeline_store.window(3600)[1]]
    assert "alloc_retry" in kinds and "oom" in kinds


def test_fragmentation_needs_much_cached_memory_and_little_free(rig):
    full = frames({"processes": [{"pid": "rank:0", "mem": 76 * GiB}]})
    r = rig({"gpus": TWO[:1], "frames": [full]}, ranks=1)
    r.cuda[0] = cuda("GPU-aaaa", 40 * GiB, 74 * GiB, inactive_split=12 * GiB)
    r.tick()
    (a,) = r.alerts("fragmentation")
    assert "expandable_segments:True" in a["hint"] and "12.0 GiB of it in split blocks" in a["message"]
    assert a["fraction"] == round(34 / 74, 3)
    wg, view = r.watch.worker_gpu(0), r.gpu(0)
    assert rank_alerts.fragmentation(0, wg, view, None, alerts.AlertConfig(frag=0.5)) is None  # 46% cached
    assert rank_alerts.fragmentation(0, wg, view, None, alerts.AlertConfig(mem_high=0.96)) is None  # enough free


def test_an_oom_on_exit_says_what_else_was_on_the_gpu(rig):
    r = rig({"gpus": TWO[:1], "frames": [frames({"processes": [
        {"pid": "rank:0", "mem": 70 * GiB}, {"pid": "rank:1", "mem": 5 * GiB}, {"pid": "parent", "mem": 4 * GiB}]})]})
    r.tick()
    tail = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    a = r.watch.on_worker_exit(0, tail)
    m = a["message"]
    assert m.startswith("rank 0 ran out of CUDA memory on GPU 0 and died of it: rank 1 held 5.0 GiB")
    assert "GPU 0 had 79.0 GiB of 80.0 GiB used" in m and a["short"] == "OOM rank 0"
    assert "held 4.0 GiB (outside this run)" in m and "it asked for 2.0 GiB" in m
    assert a in r.gpu(0)["alerts"] and r.emitted("oom")


def test_a_gpu_idle_while_the_others_work(rig):
    cfg = alerts.AlertConfig(idle_s=30)
    scen = {"gpus": TWO, "frames": [frames({"util_gpu": 93, "processes": [{"pid": "rank:0", "mem": 20 * GiB},
                                                                          {"pid": "rank:1", "mem": 20 * GiB}]},
                                           {"util_gpu": 0, "processes": []})]}
    r = rig(scen, cfg=cfg)
    r.tick(n=29)
    assert not r.alerts("idle")
    r.tick(n=2)
    (a,) = r.alerts("idle")
    assert a["gpu"] == 1 and a["severity"] == "warning" and "GPU 0 at 93% (ranks 0 and 1)" in a["message"]
    assert "set_device" in a["hint"]  # ranks piled up on GPU 0
    hidden = rig(scen, cfg=cfg, env={"CUDA_VISIBLE_DEVICES": "0"})  # GPU 1 is not the run's
    hidden.tick(n=40)
    assert not hidden.alerts("idle")


def test_low_use_while_ranks_run_hints_the_batch_could_grow(rig):
    r = rig({"gpus": TWO[:1], "frames": [frames({"util_gpu": 4, "processes": [{"pid": "rank:0", "mem": 3 * GiB}]})]},
            ranks=1, cfg=alerts.AlertConfig(idle_s=10))
    r.tick(n=12)
    (a,) = r.alerts("idle")
    assert a["severity"] == "info" and "batch size could probably grow" in a["message"]
    assert "rank 0 runs" in a["message"]
    r.running.clear()  # paused: the clock starts again
    r.tick()
    assert not r.alerts("idle")


def test_an_alert_is_announced_when_it_starts_and_again_only_after_the_cooldown(rig):
    on = frames({"processes": [{"pid": "rank:0", "mem": GiB}, {"pid": "parent", "mem": 10 * GiB}]})
    off = frames({"processes": [{"pid": "rank:0", "mem": GiB}]})
    r = rig({"gpus": TWO[:1], "frames": [on, {**off, "at": 10}, {**on, "at": 20}, {**off, "at": 30},
                                         {**on, "at": 100}]}, ranks=1)
    r.tick(n=25)  # on, off, on again within the cooldown
    assert len(r.emitted("outside")) == 1
    r.tick(n=80)  # off, then on after the cooldown
    assert len(r.emitted("outside")) == 2
    assert all(set(f) >= {"kind", "gpu", "message", "severity", "hint", "short"} for f in r.emitted("outside"))


def test_oom_line_is_found_in_the_stderr_tail():
    tail = ["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"]
    assert rank_alerts.oom_line(tail).startswith("torch.OutOfMemoryError")
    assert rank_alerts.oom_line(["RuntimeError: CUDA error: out of memory"]) is not None
    assert rank_alerts.oom_line(["RuntimeError: shapes do not match", "ValueError: memory"]) is None
    assert rank_alerts.oom_line([]) is None and rank_alerts.oom_line(None) is None
