"""Issue 33: the OOM finding (supervisor.gpu.oom_story, kept by supervisor.gpu.oom_findings): what
mpwatch knew when a rank ran out of CUDA memory, as one alert. The views are the GPU watcher's own, on a scripted
NVML with real processes for the ranks (tests/supervisor/gpu_rig.py); the records are what
mpwatch.worker.cuda_memory sends (tests/memory/test_worker_side.py reads them off a real worker),
the messages torch's own words (testing.torch_cuda writes them as torch does)."""
from __future__ import annotations

import pytest

from mpwatch.supervisor.gpu import oom_words
from mpwatch.supervisor.gpu.alerts import AlertConfig
from mpwatch.testing.torch_cuda import oom_message
from tests.supervisor.gpu_rig import GiB, MiB, Rig, cuda, rigs

TWO = [{"name": "Fake A", "mem_total": 80 * GiB, "uuid": "GPU-aaaa"},
       {"name": "Fake B", "mem_total": 80 * GiB, "uuid": "GPU-bbbb"}]
V1 = ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 12.08 GiB already "
      "allocated; 1.05 GiB free; 13.22 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory "
      "try setting max_split_size_mb to avoid fragmentation.")
PROCESSES = ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which "
             "12.75 MiB is free. Process 4242 has 40.00 GiB memory in use. Process 4243 has 39.10 GiB memory in "
             "use. Of the allocated memory 38.50 GiB is allocated by PyTorch, and 120.00 MiB is reserved by "
             "PyTorch but unallocated.")


@pytest.fixture
def rig(tmp_path):
    yield from rigs(tmp_path)


def record(seq=1, alloc=2 * GiB, free=GiB, allocated=19 * GiB, reserved=int(19.5 * GiB), **more):
    """An OomRecord as worker.cuda_memory's observer sends it."""
    return {"seq": seq, "ts": 1.0, "device": 0, "uuid": "GPU-aaaa", "alloc": alloc, "total": 80 * GiB, "free": free,
            "allocated": allocated, "reserved": reserved, "inactive_split": 0, "snapshot": None,
            "snapshot_error": None, "message": None, **more}


def crowded(rig, **cfg):
    """The contention demo's mistake: ranks 0 and 1 both on GPU 0, rank 2 on GPU 1 with a stray
    context on GPU 0, a process outside the run there too."""
    r = rig({"gpus": TWO, "frames": [{"at": 0, "gpus": [
        {"processes": [{"pid": "rank:0", "mem": 20 * GiB}, {"pid": "rank:1", "mem": 30 * GiB},
                       {"pid": "rank:2", "mem": 512 * MiB}, {"pid": "parent", "mem": 6 * GiB}]},
        {"processes": [{"pid": "rank:2", "mem": 25 * GiB}]}]}]}, ranks=3, cfg=AlertConfig(**cfg))
    r.cuda[0] = cuda("GPU-aaaa", 19 * GiB, int(19.5 * GiB))
    r.cuda[1] = cuda("GPU-aaaa", 29 * GiB, 29 * GiB)
    r.cuda[2] = cuda("GPU-bbbb", 24 * GiB, 24 * GiB)
    r.tick()
    return r


# ------------------------------------------------------------------ words ----
def test_the_numbers_of_torchs_oom_messages_old_and_new_and_the_drivers():
    w = oom_words.read(oom_message(0, 2 * GiB, 80 * GiB, int(1.25 * GiB), int(38.5 * GiB), 40 * GiB))
    assert (w.tried, w.device, w.total, w.free) == (2 * GiB, 0, 80 * GiB, int(1.25 * GiB))
    assert (w.allocated, w.reserved, w.cached) == (int(38.5 * GiB), 40 * GiB, int(1.5 * GiB))
    old = oom_words.read(V1)
    assert (old.tried, old.total, old.free) == (2 * GiB, round(15.78 * GiB), round(1.05 * GiB))
    assert (old.allocated, old.reserved) == (round(12.08 * GiB), round(13.22 * GiB))
    listed = oom_words.read(PROCESSES)
    assert listed.processes == ((4242, 40 * GiB), (4243, round(39.1 * GiB))) and listed.free == round(12.75 * MiB)
    assert oom_words.read("RuntimeError: CUDA error: out of memory") == oom_words.OomWords()
    cut = oom_words.read(PROCESSES[:60])  # cut short: what is there is read, the rest unknown
    assert cut.tried == 20 * MiB and cut.free is None and cut.cached is None


# ------------------------------------------------------------- who held it ----
def test_an_oom_names_the_rank_sharing_the_gpu_and_another_ranks_stray_context(rig):
    r = crowded(rig)
    a = r.watch.on_oom(0, r.pid(0), record())
    m = a["message"]
    # who held the memory first: at 80 columns the alert's line is cut
    assert m.startswith("rank 0 ran out of CUDA memory on GPU 0: rank 1 held 30.0 GiB (it runs on this GPU too), ")
    assert "rank 2's stray context held 512.0 MiB (rank 2 runs on GPU 1)" in m
    assert "held 6.0 GiB (outside this run)" in m and "it asked for 2.0 GiB with 1.0 GiB free of 80.0 GiB" in m
    assert "rank 0's allocator: 19.0 GiB allocated, 19.5 GiB reserved (512.0 MiB of it reserved but unallocated)" in m
    assert a["oom"]["story"] == "others" and "set_device" in a["hint"] and "expandable" not in a["hint"]
    assert a["oom"]["note"] == "CUDA OOM on GPU 0: rank 1 (sharing the GPU) held 30.0G; asked 2.0G, 1.0G free"
    assert [(o["rank"], o["who"]) for o in a["others"]][:2] == [(1, "shares"), (None, "outside")]
    assert r.watch.memory(0, r.pid(0))[0]["oom"] == a["oom"]["note"] and r.watch.memory(1, r.pid(1)) is None
    assert [x["kind"] for x in r.emitted("oom")] == ["oom"] and a in r.gpu(0)["alerts"]


def test_the_rank_itself_holding_the_gpu_is_its_own_story(rig):
    r = rig({"gpus": TWO[:1], "frames": [{"at": 0, "gpus": [{"processes": [{"pid": "rank:0", "mem": 78 * GiB}]}]}]},
            ranks=1)
    r.cuda[0] = cuda("GPU-aaaa", 77 * GiB, int(77.2 * GiB))
    r.tick()
    a = r.watch.on_oom(0, r.pid(0), record(allocated=77 * GiB, reserved=int(77.2 * GiB), free=512 * MiB))
    assert a["oom"]["story"] == "own" and "batch size" in a["hint"] and "expandable" not in a["hint"]
    assert a["message"].startswith("rank 0 ran out of CUDA memory on GPU 0: nothing else held memory on GPU 0 "
                                   "(at the last sample, GPU 0 had 78.0 GiB of 80.0 GiB used)")
    assert a["oom"]["note"] == "CUDA OOM on GPU 0: rank 0 itself held 78.0G; asked 2.0G, 512M free"


def test_the_drivers_reserve_is_said_apart_from_the_memory_the_ranks_may_use(rig):
    """MemoryInfo_v2 tells the driver's reserve apart (never in mem_used): the GPU's room is
    the total less it, and the finding says so (it said 78 of 80 GiB, as if 2 GiB were free)."""
    frame = {"reserved": GiB, "processes": [{"pid": "rank:0", "mem": 78 * GiB}]}
    r = rig({"gpus": TWO[:1], "frames": [{"at": 0, "gpus": [frame]}]}, ranks=1)
    r.cuda[0] = cuda("GPU-aaaa", 77 * GiB, int(77.2 * GiB))
    r.tick()
    a = r.watch.on_oom(0, r.pid(0), record(allocated=77 * GiB, reserved=int(77.2 * GiB), free=512 * MiB))
    assert ("(at the last sample, GPU 0 had 78.0 GiB of 79.0 GiB used; the driver keeps 1.0 GiB)"
            in a["message"]), a["message"]


# ---------------------------------------------------------- fragmentation ----
def test_fragmentation_is_the_story_only_when_the_cache_held_the_bytes_asked_for(rig):
    r = crowded(rig)
    frag = r.watch.on_oom(0, r.pid(0), record(allocated=10 * GiB, reserved=int(19.5 * GiB)))
    assert frag["oom"]["story"] == "fragmentation" and "expandable_segments:True" in frag["hint"]
    assert frag["oom"]["note"].startswith("CUDA OOM on GPU 0: 9.5G cached in pieces, asked 2.0G")
    # The same GPU, a cache of 512 MiB for 2 GiB asked: the memory was taken, not fragmented.
    r2 = crowded(rig)
    taken = r2.watch.on_oom(0, r2.pid(0), record())
    assert taken["oom"]["story"] != "fragmentation"
    assert "expandable" not in taken["hint"] and "expandable" not in taken["oom"]["note"]
    # From torch's words alone (no record): 1.5 GiB reserved but unallocated
    line = "torch.OutOfMemoryError: " + oom_message(0, 2 * GiB, 80 * GiB, GiB, int(38.5 * GiB), 40 * GiB)
    r3 = crowded(rig)
    words_only = r3.watch.on_worker_exit(0, [line], pid=r3.pid(0))
    assert words_only["oom"]["story"] != "fragmentation" and "expandable" not in words_only["hint"]
    line = "torch.OutOfMemoryError: " + oom_message(0, GiB, 80 * GiB, GiB, int(38.5 * GiB), 40 * GiB)
    r4 = crowded(rig)
    assert r4.watch.on_worker_exit(0, [line], pid=r4.pid(0))["oom"]["story"] == "fragmentation"


# --------------------------------------------------------------- one finding ----
def test_the_death_completes_the_finding_of_its_oom_in_place(rig):
    r = crowded(rig)
    live = r.watch.on_oom(0, r.pid(0), record(snapshot="/runs/x/rank-0/memory/oom-1.pickle"))
    r.tick()
    line = "torch.OutOfMemoryError: " + oom_message(0, 2 * GiB, 80 * GiB, GiB, 19 * GiB, int(19.5 * GiB))
    dead = r.watch.on_worker_exit(0, ["Traceback (most recent call last):", line], pid=r.pid(0),
                                  record=record(message="OutOfMemoryError: " + line))
    assert dead["since"] == live["since"] and dead["key"] == live["key"] and dead["oom"]["died"]
    assert dead["message"].startswith("rank 0 ran out of CUDA memory on GPU 0 and died of it: rank 1 held 30.0 GiB")
    assert "snapshot at the OOM: /runs/x/rank-0/memory/oom-1.pickle" in dead["message"]
    told = r.emitted("oom")
    assert len(told) == 2 and "update" not in told[0] and told[1]["update"] is True
    assert [a["key"] for a in r.gpu(0)["alerts"] if a["kind"] == "oom"] == [live["key"]]  # one finding


def test_a_script_catching_ooms_in_a_loop_is_one_finding_not_one_a_step(rig):
    r = crowded(rig)
    for seq in range(1, 6):
        r.watch.on_oom(0, r.pid(0), record(seq=seq))
        r.tick()
    assert len(r.emitted("oom")) == 1 and len([a for a in r.alerts("oom") if a["rank"] == 0]) == 1


def test_the_allocator_counts_caught_oom_gives_way_to_the_finding(rig):
    r = crowded(rig)
    r.cuda[0] = cuda("GPU-aaaa", 19 * GiB, int(19.5 * GiB), num_ooms=1)
    r.tick()  # the counter rose first: its bare alert is told
    assert [a["message"] for a in r.alerts("oom")] and len(r.emitted("oom")) == 1
    a = r.watch.on_oom(0, r.pid(0), record())
    r.tick(n=3)
    assert [x["message"] for x in r.alerts("oom")] == [a["message"]]
    assert r.emitted("oom")[1]["update"] is True  # told as the completion of that alert, not a second one


def test_a_failure_that_is_no_oom_is_no_finding(rig):
    r = crowded(rig)
    assert r.watch.on_worker_exit(0, ["RuntimeError: shapes do not match"], pid=r.pid(0)) is None
    assert not r.emitted("oom") and not r.alerts("oom") and r.watch.memory(0, r.pid(0)) is None


def test_without_gpu_data_torchs_message_still_names_the_processes(rig):
    r = crowded(rig)
    r.watch._views = []  # as when NVML cannot be opened: no view of any GPU
    line = PROCESSES.replace("4242", str(r.pid(1)))
    a = r.watch.on_worker_exit(0, [line], pid=r.pid(0))
    assert "no sample showed what else was on" in a["message"] and a["others"][0]["rank"] == 1
    assert a["oom"]["tried"] == 20 * MiB and a["oom"]["free"] == round(12.75 * MiB)


def test_an_oom_on_a_mig_slice_names_that_slice_and_only_its_processes(tmp_path, libnvml, monkeypatch):
    """On a GPU in MIG mode the memory that counts is the slice's: the finding is placed on it
    (gi, ci), named as it is, and the rank on the other slice held none of it."""
    from tests.supervisor.test_gpu_mig import on_slices

    r = Rig(tmp_path, on_slices([{"pid": "rank:0", "mem": 36 * GiB}, {"pid": "rank:1", "mem": 3 * GiB}],
                                [{"pid": "rank:2", "mem": 30 * GiB}]), ranks=3, lib=libnvml, monkeypatch=monkeypatch)
    try:
        r.cuda = {0: cuda("MIG-aaaa", 35 * GiB, 35 * GiB), 1: cuda("MIG-aaaa", 2 * GiB, 2 * GiB),
                  2: cuda("MIG-bbbb", 29 * GiB, 29 * GiB)}
        r.tick(n=6)
        a = r.watch.on_oom(0, r.pid(0), record(uuid="MIG-aaaa", allocated=35 * GiB, reserved=35 * GiB,
                                               total=40 * GiB, free=512 * MiB))
        assert (a["gpu"], a["gi"], a["ci"]) == (0, 1, 0) and a["key"] == "oom:0:0/1/0"
        assert a["message"].startswith("rank 0 ran out of CUDA memory on GPU 0 MIG 3g.40gb (GI 1): rank 1 held 3.0 GiB")
        assert "rank 2" not in a["message"] and a["oom"]["story"] == "own"  # rank 2 is on the other slice
        (g,) = r.gpus()
        assert [x["key"] for x in g["slices"][0]["alerts"] if x["kind"] == "oom"] == [a["key"]]
        assert not [x for x in g["slices"][1]["alerts"] + g["alerts"] if x["kind"] == "oom"]
    finally:
        r.close()
