"""The GPU alert decisions, on hand-made GPU views: no processes, no NVML."""
from mpwatch.supervisor import gpu_alerts as ga

GiB = 1 << 30
CFG = ga.AlertConfig()


def proc(pid, mem, rank=None, child_of=None, user="alice", cmd="python train.py", visible=True):
    return {"pid": pid, "rank": rank, "child_of": child_of, "user": user, "cmd": cmd, "mem_bytes": mem,
            "visible": visible}


def gpu(procs, index=0, used=None, total=80 * GiB, util=90):
    if used is None:
        used = sum(p["mem_bytes"] or 0 for p in procs)
    return {"index": index, "mem_used": used, "mem_total": total, "util_gpu": util, "util_mem": 10,
            "processes": procs}


# ---------------------------------------------------------------- contention ----
def test_two_ranks_on_one_gpu_is_contention():
    g = gpu([proc(100, 4 * GiB, rank=0), proc(101, 2 * GiB, rank=1)])
    a = ga.contention(g)
    assert a["kind"] == "contention" and a["ranks"] == [0, 1] and a["gpu"] == 0
    assert "ranks 0 and 1" in a["message"] and "4.0 GiB" in a["message"] and "set_device" in a["message"]


def test_one_rank_with_its_own_child_is_not_contention():
    g = gpu([proc(100, 4 * GiB, rank=0), proc(200, GiB, child_of=0)])
    assert ga.contention(g) is None
    assert ga.ranks_on(g) == {0: 5 * GiB}


def test_a_childs_memory_counts_for_its_rank_in_contention():
    g = gpu([proc(100, 4 * GiB, rank=0), proc(201, GiB, child_of=1)])
    assert ga.contention(g)["ranks"] == [0, 1]


def test_contention_key_changes_with_the_ranks_involved():
    a = ga.contention(gpu([proc(1, 1, rank=0), proc(2, 1, rank=1)]))
    b = ga.contention(gpu([proc(1, 1, rank=0), proc(2, 1, rank=1), proc(3, 1, rank=2)]))
    assert a["key"] != b["key"] and b["ranks"] == [0, 1, 2]
    assert "ranks 0, 1 and 2" in b["message"]


# ------------------------------------------------------------------ outsiders ----
def test_an_outside_process_next_to_a_worker_is_named_with_user_and_size():
    g = gpu([proc(100, 4 * GiB, rank=0), proc(555, 3 * GiB, user="bob", cmd="python other_job.py")])
    (a,) = ga.outsiders(g)
    assert a["kind"] == "outside" and a["pid"] == 555 and a["user"] == "bob" and a["mem_bytes"] == 3 * GiB
    assert "pid 555 (bob: python other_job.py)" in a["message"] and "3.0 GiB" in a["message"]
    assert "rank 0" in a["message"]


def test_outsiders_on_a_gpu_no_worker_uses_are_not_our_business():
    g = gpu([proc(555, 3 * GiB, user="bob")])
    assert ga.outsiders(g) == []


def test_an_invisible_outsider_says_so():
    g = gpu([proc(100, GiB, rank=0), proc(4000000, GiB, user=None, cmd="not visible", visible=False)])
    (a,) = ga.outsiders(g)
    assert "not visible" in a["message"] and "4000000" in a["message"]


# --------------------------------------------------------------- memory high ----
def test_growth_rates_use_the_window_only():
    hist = {0: [(0.0, 0), (50.0, 10 * GiB), (100.0, 10 * GiB)], 1: [(90.0, GiB), (100.0, 2 * GiB)],
            2: [(100.0, GiB)]}
    rates = ga.growth_rates(hist, now=100.0, window=60.0)
    assert rates[0] == 0  # the jump at t=50 is inside the window, but flat since then...
    assert abs(rates[1] - GiB / 10) < 1
    assert 2 not in rates  # one point: no rate
    rates = ga.growth_rates(hist, now=100.0, window=100.0)
    assert abs(rates[0] - 10 * GiB / 100) < 1


def test_memory_high_names_the_fastest_growing_rank():
    g = gpu([proc(100, 40 * GiB, rank=0), proc(101, 34 * GiB, rank=1)], used=74 * GiB, total=80 * GiB)
    a = ga.memory_high(g, {0: 0.0, 1: 50 * (1 << 20)}, CFG)
    assert a["kind"] == "memory_high" and a["rank"] == 1 and a["fraction"] == round(74 / 80, 3)
    assert "92%" in a["message"] and "rank 1 grows fastest" in a["message"] and "+50.0 MiB/s" in a["message"]


def test_memory_high_without_growth_names_the_biggest_holder():
    g = gpu([proc(100, 40 * GiB, rank=0), proc(101, 34 * GiB, rank=1)])
    a = ga.memory_high(g, {}, CFG)
    assert a["rank"] == 0 and "holds the most" in a["message"]


def test_memory_high_threshold_is_strict_and_configurable():
    g = gpu([proc(100, 72 * GiB, rank=0)])  # exactly 90%
    assert ga.memory_high(g, {}, CFG) is None
    assert ga.memory_high(g, {}, ga.AlertConfig(mem_high=0.8)) is not None
    assert ga.memory_high(gpu([proc(1, 1, rank=0)], used=None), {}, CFG) is None  # N/A memory: no alert


def test_config_from_env_accepts_fraction_or_percent_and_ignores_junk():
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "85"}).mem_high == 0.85
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "0.7"}).mem_high == 0.7
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "lots"}).mem_high == 0.9
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "250"}).mem_high == 0.9
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_IDLE_S": "5"}).idle_s == 5.0
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_IDLE_S": "-1"}).idle_s == 60.0


# ---------------------------------------------------------------------- idle ----
def test_low_use_for_the_window_while_workers_run_is_a_batch_hint():
    g = gpu([proc(100, 2 * GiB, rank=0)], util=5)
    since = None
    for t in (0.0, 30.0, 59.0):
        since = ga.low_use_since(since, t, g, running_ranks={0}, cfg=CFG)
    assert since == 0.0
    assert ga.idle_hint(g, since, 59.0, CFG) is None
    a = ga.idle_hint(g, since, 60.0, CFG)
    assert a["kind"] == "idle" and "batch size" in a["message"] and "rank 0" in a["message"]
    assert "memory at 2%" in a["message"] and "utilization at 5%" in a["message"]
    assert "rank 0 runs on it" in a["message"]


def test_busy_or_paused_or_unknown_resets_the_low_use_clock():
    low = gpu([proc(100, 2 * GiB, rank=0)], util=5)
    assert ga.low_use_since(0.0, 10.0, gpu([proc(100, 2 * GiB, rank=0)], util=95), {0}, CFG) is None
    assert ga.low_use_since(0.0, 10.0, gpu([proc(100, 60 * GiB, rank=0)], util=5), {0}, CFG) is None
    assert ga.low_use_since(0.0, 10.0, low, running_ranks=set(), cfg=CFG) is None  # paused/stalled
    assert ga.low_use_since(0.0, 10.0, gpu([proc(100, GiB, rank=0)], util=None), {0}, CFG) is None
    assert ga.low_use_since(None, 10.0, gpu([proc(5, GiB)], util=1), {0}, CFG) is None  # no worker on it


def test_evaluate_gathers_every_standing_alert():
    g = gpu([proc(100, 40 * GiB, rank=0), proc(101, 30 * GiB, rank=1), proc(7, 5 * GiB, user="bob")])
    kinds = sorted(a["kind"] for a in ga.evaluate(g, {}, None, 0.0, CFG))
    assert kinds == ["contention", "memory_high", "outside"]
    assert ga.evaluate(gpu([proc(100, GiB, rank=0)]), {}, None, 0.0, CFG) == []


# ----------------------------------------------------------------------- OOM ----
TAIL = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.11 GiB of which 1.25 GiB is free."]


def test_oom_line_is_found_in_the_stderr_tail():
    assert ga.oom_line(TAIL).startswith("torch.OutOfMemoryError")
    assert ga.oom_line(["RuntimeError: CUDA error: out of memory"]) is not None
    assert ga.oom_line(["RuntimeError: shapes do not match", "ValueError: memory"]) is None
    assert ga.oom_line([]) is None and ga.oom_line(None) is None


def test_oom_alert_says_which_gpu_and_what_else_was_there():
    view = gpu([proc(100, 70 * GiB, rank=1), proc(101, 5 * GiB, rank=0),
                proc(555, 4 * GiB, user="bob", cmd="python eval.py"), proc(300, GiB, child_of=0)])
    a = ga.oom_alert(1, 0, view, ga.oom_line(TAIL), age_s=3.2)
    m = a["message"]
    assert a["kind"] == "oom" and a["rank"] == 1 and a["gpu"] == 0
    assert m.startswith("rank 1 died of CUDA out of memory on GPU 0")
    assert "(3s before)" in m and "80.0 GiB of 80.0 GiB used" in m
    assert "rank 0 5.0 GiB" in m and "pid 555 (bob: python eval.py) 4.0 GiB" in m
    assert "child of rank 0 (pid 300)" in m and "tried to allocate 2.00 GiB" in m
    assert {o["pid"] for o in a["others"]} == {101, 555, 300}  # not the rank that died


def test_oom_alert_on_an_unknown_gpu_still_says_oom():
    a = ga.oom_alert(3, None, None, "CUDA out of memory")
    assert a["gpu"] is None and "rank 3 died of CUDA out of memory on an unknown GPU" in a["message"]
