"""Issue 33 in real headless runs: CUDA OOM forensics end to end. The stand-in libnvidia-ml.so.1
(under the real nvidia-ml-py) gives the GPU's processes, the scripted torch (testing.torch_cuda:
torch's own calls, MPWATCH_SCRIPTED_CUDA) the ranks' allocators; the workers are
tests/fixtures/cuda_oom.py, the fixture scripts/gpu-check runs on a real GPU."""
from __future__ import annotations

import json
import os

from mpwatch.rundir import layout
from tests.helpers import FIXTURES, mpwatch, wait_for
from tests.supervisor.test_gpu_run import gpu_env

GiB, MiB = 1 << 30, 1 << 20
OOM = FIXTURES / "cuda_oom.py"
OPTS = ["--gpu-interval", "0.1"]


def crowded(libnvml, tmp_path, **extra):
    """The contention demo's mistake on a 80 GiB GPU 0: ranks 0 and 1 both on it (rank 1 holding
    42 GiB), rank 2 on GPU 1 with a stray context on GPU 0, a process outside the run there too;
    rank 0 asks for 2 GiB more with 1 GiB free."""
    nvml = {"gpus": [{"mem_total": 80 * GiB, "uuid": "GPU-aaaa"}, {"mem_total": 80 * GiB, "uuid": "GPU-bbbb"}],
            "frames": [{"gpus": [
                {"processes": [{"pid": "rank:0", "mem": 30 * GiB}, {"pid": "rank:1", "mem": 42 * GiB},
                               {"pid": "rank:2", "mem": 1536 * MiB}, {"pid": "parent", "mem": 5632 * MiB}]},
                {"processes": [{"pid": "rank:2", "mem": 22 * GiB}]}]}]}

    def frame(uuid, alloc, reserved, **more):
        return [{"at": 0, "device": 0, "uuid": uuid, "allocated": int(alloc * GiB), "reserved": int(reserved * GiB),
                 "max_allocated": int(alloc * GiB), **more}]
    cuda = {"0": frame("GPU-aaaa", 29, 29.4, total=80 * GiB, free=GiB), "1": frame("GPU-aaaa", 41, 41.5),
            "2": frame("GPU-bbbb", 20, 21)}
    return gpu_env(libnvml, tmp_path, nvml, cuda=cuda, CHUNK_MB="2048", **extra)


def on_gpus(run, n=3):
    """Every rank on its GPU, and GPU 0's process list naming all of them (rank 2's stray context too)."""
    def seen(st):
        g0 = st["gpus"][0] if st["gpus"] else {"processes": []}
        return len(st["workers"]) == n and all(w["gpu"] for w in st["workers"]) \
            and {p["rank"] for p in g0["processes"]} >= set(range(n))
    wait_for(lambda: seen(run.status()), 60, what="every rank seen on its GPU, and all of them on GPU 0")


def test_a_rank_dying_of_oom_is_one_finding_naming_who_held_the_memory(headless, tmp_path, libnvml):
    go = tmp_path / "go"
    run = headless(OOM, go, n=3, opts=[*OPTS, "--cuda-memory-history"], env=crowded(libnvml, tmp_path, OOM_RANKS="0"))
    on_gpus(run)
    go.write_text("")
    (dead,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "oom" and e.get("update"), timeout=60)
    (live,) = [e for e in run.events("gpu_alert") if e["kind"] == "oom" and not e.get("update")]
    assert live["oom"]["died"] is False and dead["oom"]["died"] is True and dead["rank"] == 0 == dead["gpu"]
    m = dead["message"]
    assert m.startswith("rank 0 ran out of CUDA memory on GPU 0 and died of it: rank 1 held 42.0 GiB (it runs on "
                        "this GPU too)")
    assert "rank 2's stray context held 1.5 GiB (rank 2 runs on GPU 1)" in m
    assert f"pid {os.getpid()} (" in m and "held 5.5 GiB (outside this run)" in m
    assert "it asked for 2.0 GiB with 1.0 GiB free" in m
    snap = dead["oom"]["snapshot"]
    assert snap.startswith(str(run.run_dir / "rank-0" / layout.MEMORY / "oom-")) and os.path.getsize(snap) > 0
    assert f"snapshot at the OOM: {snap}" in m and "set_device" in dead["hint"]
    assert "expandable" not in dead["hint"] and "expandable" not in dead["oom"]["note"]
    w = wait_for(lambda: (lambda w: w if w["state"] == "failed" else None)(run.worker(0)), 30, what="rank 0 failed")
    assert w["memory"] == {"oom": "CUDA OOM on GPU 0: rank 1 (sharing the GPU) held 42.0G; asked 2.0G, 1.0G free",
                           "snapshot": snap}
    g0 = run.status()["gpus"][0]
    assert [a["message"] for a in g0["alerts"] if a["kind"] == "oom"] == [m]  # one finding
    text = mpwatch("ctl", "--run", run.run_dir, "status").stdout
    assert f"memory: {w['memory']['oom']}; snapshot {snap}" in text
    run.ctl("stop")
    run.wait_exit(60)
    summary = json.loads(mpwatch("summary", run.run_dir, "--json").stdout)
    assert [a["message"] for a in summary["alerts"] if a["kind"] == "oom"] == [m]


def test_a_caught_oom_is_the_finding_of_a_rank_that_goes_on(headless, tmp_path, libnvml):
    go = tmp_path / "go"
    run = headless(OOM, go, n=3, opts=OPTS, env=crowded(libnvml, tmp_path, OOM_RANKS="0", CATCH="0"))
    on_gpus(run)
    go.write_text("")
    (ev,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "oom", timeout=60)
    assert "no snapshot (--cuda-memory-history keeps one at an OOM)" in ev["message"] and not ev["oom"]["died"]
    step = run.worker(0)["step"]
    wait_for(lambda: run.worker(0)["step"] >= step + 5, 60, what="rank 0 stepping on after its OOM")
    w = run.worker(0)
    assert w["state"] == "running" and w["memory"]["oom"].startswith("CUDA OOM on GPU 0: rank 1 (sharing the GPU)")
    assert len([e for e in run.events("gpu_alert") if e["kind"] == "oom"]) == 1
    assert not (run.run_dir / "rank-0" / layout.MEMORY).exists()  # no history: nothing written, no folder


def test_a_healthy_run_has_no_finding_and_its_history_only_with_the_flag(headless, tmp_path, libnvml):
    """Ranks that allocate and never run out: no OOM finding, no memory note, no snapshot; the
    allocation history is recorded only with --cuda-memory-history (the workers print its entries)."""
    for flag, entries in (([], "0"), (["--cuda-memory-history"], "1")):
        folder = tmp_path / (flag[0][2:] if flag else "plain")
        folder.mkdir()
        run = headless(OOM, folder / "go", n=3, opts=[*OPTS, *flag],
                       env=crowded(libnvml, folder, HOLD_MB="256"))
        on_gpus(run)
        wait_for(lambda: all("history entries" in run.log(r) for r in range(3)), 60, what="each rank's history")
        assert all(f"history entries {entries}\n" in run.log(r) for r in range(3)), [run.log(r) for r in range(3)]
        wait_for(lambda: all((w["step"] or 0) >= 20 for w in run.status()["workers"]), 60, what="20 steps each")
        st = run.status()
        assert not [e for e in run.events("gpu_alert") if e["kind"] == "oom"]
        assert not any("memory" in w for w in st["workers"])
        assert not any(a["kind"] == "oom" for g in st["gpus"] for a in g["alerts"])
        memory = run.run_dir / "rank-0" / layout.MEMORY
        assert (memory.is_dir() and not list(memory.iterdir())) if flag else not memory.exists()
        run.ctl("stop")
        run.wait_exit(60)


def test_an_oom_whose_numbers_cannot_all_be_true_says_what_it_cannot_tell(headless, tmp_path, libnvml):
    """Issue 40: on a 79 GiB GPU the only other process NVML lists holds 78 GiB, beside the rank's
    own 76.5 GiB reserved: not both can be, as when a container shows NVML's host pid of the rank's
    own process (no process here has that pid). It read "another job holds this GPU"; it says
    now that the numbers disagree and that who held the memory cannot be told."""
    nvml = {"gpus": [{"mem_total": 79 * GiB, "uuid": "GPU-aaaa"}],
            "frames": [{"gpus": [{"processes": [{"pid": 4190000, "mem": 78 * GiB}]}]}]}
    cuda = {"0": [{"at": 0, "device": 0, "uuid": "GPU-aaaa", "allocated": 76 * GiB, "reserved": int(76.5 * GiB),
                   "max_allocated": 76 * GiB, "total": 79 * GiB, "free": 512 * MiB}]}
    go = tmp_path / "go"
    run = headless(OOM, go, n=1, opts=OPTS,
                   env=gpu_env(libnvml, tmp_path, nvml, cuda=cuda, CHUNK_MB="2048", OOM_RANKS="0"))
    wait_for(lambda: (run.worker(0)["step"] or 0) > 3 and run.status()["gpus"], 60, what="the rank stepping")
    go.write_text("")
    (dead,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "oom" and e["oom"]["died"], timeout=60)
    m = dead["message"]
    assert ("these numbers cannot all be true: the other processes held 78.0 GiB and rank 0 76.5 GiB, more than "
            "GPU 0's 79.0 GiB") in m, m
    assert "mpwatch cannot tell who held the memory" in m and dead["oom"]["story"] == "unknown"
    assert "another job" not in dead["hint"] and "nvidia-smi" in dead["hint"], dead["hint"]
    assert dead["oom"]["note"].startswith("CUDA OOM on GPU 0: who held the memory cannot be told")


def test_an_oom_message_of_a_rank_that_never_used_cuda_tells_no_story(headless, tmp_path, libnvml):
    """Issue 40: a rank mpwatch never saw use CUDA (no allocator counters, on no GPU) whose stderr
    says CUDA ran out (another library's words, or a script's): no story of who held what."""
    nvml = {"gpus": [{"mem_total": 80 * GiB, "uuid": "GPU-aaaa"}],
            "frames": [{"gpus": [{"processes": [{"pid": "parent", "mem": 30 * GiB}]}]}]}
    script = tmp_path / "says_oom.py"
    script.write_text(
        "import sys, time\nimport mpwatch\nfor s in range(5):\n    mpwatch.report(step=s)\n    time.sleep(0.1)\n"
        "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total '\n"
        "      'capacity of 79.15 GiB of which 1.25 GiB is free. Process 4242 has 30.00 GiB memory in use.',\n"
        "      file=sys.stderr)\nsys.exit(1)\n")
    run = headless(script, n=1, opts=OPTS, env=gpu_env(libnvml, tmp_path, nvml))
    assert run.wait_exit(60) == 1
    (ev,) = run.wait_event("gpu_alert", lambda e: e["kind"] == "oom", timeout=30)
    assert "mpwatch never saw rank 0 use CUDA (no allocator counters of its own, on no GPU): it cannot tell " \
           "where it ran out nor who held the memory" in ev["message"], ev["message"]
    assert "held 30.0 GiB" not in ev["message"] and ev["oom"]["story"] == "unknown"
    assert "it asked for 2.0 GiB with 1.2 GiB free" in ev["message"]
