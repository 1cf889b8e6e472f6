"""The GPU alert decisions (pure functions). Views are never written by hand here: they
are built by the watcher's own code (GpuWatch.tick) from a scripted NVML scenario."""
from mpwatch.supervisor import gpu_alerts as ga
from mpwatch.supervisor import gpu_rank_alerts as gra


def test_config_from_env_accepts_fraction_or_percent_and_ignores_junk():
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "85"}).mem_high == 0.85
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "0.7"}).mem_high == 0.7
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "lots"}).mem_high == 0.9
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_MEM_ALERT": "250"}).mem_high == 0.9
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_IDLE_S": "5"}).idle_s == 5.0
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_IDLE_S": "-1"}).idle_s == 60.0
    assert ga.AlertConfig.from_env({"MPWATCH_GPU_OUTSIDE": "10"}).outside == 0.1


TAIL = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.11 GiB of which 1.25 GiB is free."]


def test_oom_line_is_found_in_the_stderr_tail():
    assert gra.oom_line(TAIL).startswith("torch.OutOfMemoryError")
    assert gra.oom_line(["RuntimeError: CUDA error: out of memory"]) is not None
    assert gra.oom_line(["RuntimeError: shapes do not match", "ValueError: memory"]) is None
    assert gra.oom_line([]) is None and gra.oom_line(None) is None


def test_oom_alert_on_an_unknown_gpu_still_says_oom():
    a = gra.oom_alert(3, None, None, "CUDA out of memory")
    assert a["gpu"] is None and "rank 3 died of CUDA out of memory on an unknown GPU" in a["message"]
    assert a["severity"] == "error" and a["hint"] and a["short"] == "OOM rank 3"
