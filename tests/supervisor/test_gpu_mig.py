"""MIG slices as GPUs of their own in the GPU watcher: which slice is a rank's, contention only
between ranks on the same slice, each slice's memory, what MIG does not report. The watcher's
own code (GpuWatch.tick) over the stand-in libnvidia-ml.so.1 and nvidia-ml-py, real processes
for the ranks (tests/supervisor/gpu_rig.py)."""
import pytest

from mpwatch.contract import leaves
from mpwatch.supervisor.gpu import ranks
from tests.supervisor.gpu_rig import GiB, cuda, rigs

A100 = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100", "mem_total": 80 * GiB, "mig": [
    {"uuid": "MIG-aaaa", "gi": 1, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB},
    {"uuid": "MIG-bbbb", "gi": 2, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB}]}


def on_slices(first: list, second: list) -> dict:
    return {"gpus": [A100], "frames": [{"gpus": [{"temperature": 45, "slices": [
        {"processes": first, "extra_used": GiB // 2}, {"processes": second}]}]}]}


@pytest.fixture
def rig(tmp_path, libnvml, monkeypatch):
    yield from rigs(tmp_path, lib=libnvml, monkeypatch=monkeypatch)


def kinds(views) -> list[str]:
    return [a["kind"] for v in views for x in (v, *v.get("slices", ())) for a in x["alerts"]]


@pytest.mark.root("reading a MIG GPU's own memory, root's")
def test_two_ranks_on_two_slices_of_one_gpu_do_not_contend(rig):
    r = rig(on_slices([{"pid": "rank:0", "mem": 10 * GiB}], [{"pid": "rank:1", "mem": 12 * GiB}]))
    r.cuda = {0: cuda("MIG-aaaa", 8 * GiB, 9 * GiB), 1: cuda("MIG-bbbb", 10 * GiB, 11 * GiB)}
    r.tick(n=6)
    (g,) = r.gpus()
    a, b = g["slices"]
    assert (a["mig"], a["uuid"], a["mem_used"], a["mem_total"], a["ranks"]) == (
        {"gi": 1, "ci": 0, "profile": "3g.40gb"}, "MIG-aaaa", 10 * GiB + GiB // 2, 40 * GiB, [0])
    assert (b["mem_used"], b["ranks"]) == (12 * GiB, [1])
    assert g["ranks"] == [] and g["mem_used"] == 22 * GiB + GiB // 2  # root here: the whole GPU too
    assert "contention" not in kinds(r.gpus()) and not r.emitted("contention")
    w0, w1 = r.watch.worker_gpu(0), r.watch.worker_gpu(1)
    assert (w0["index"], w0["uuid"], w0["mig"]["gi"], w0["mapped_by"], w0["shared_with"]) == (0, "MIG-aaaa", 1, "uuid", [])
    assert (w1["mig"]["gi"], w1["mem_bytes"], w1["shared_with"]) == (2, 12 * GiB, [])
    assert w0["gpus"] == [{"index": 0, "mem_bytes": 10 * GiB, "gi": 1, "ci": 0}]
    assert a["breakdown"] == {"allocated": 8 * GiB, "cached": GiB, "other": GiB, "outside": 0}
    # Utilization is not reported on MIG: n/a, never 0, on the GPU and each slice.
    for v in (g, a, b):
        assert v["util_gpu"] is None and v["errors"]["utilization"] == "n/a on MIG"
        assert all(p["sm_util"] is None for p in v["processes"])


def test_two_ranks_on_one_slice_contend_there_only(rig):
    r = rig(on_slices([{"pid": "rank:0", "mem": 10 * GiB}, {"pid": "rank:1", "mem": 9 * GiB}],
                      [{"pid": "rank:2", "mem": 3 * GiB}]), ranks=3)
    r.cuda = {0: cuda("MIG-aaaa", 8 * GiB, 9 * GiB), 1: cuda("MIG-aaaa", 7 * GiB, 8 * GiB),
              2: cuda("MIG-bbbb", 2 * GiB, 2 * GiB)}
    r.tick(n=6)
    (g,) = r.gpus()
    a, b = g["slices"]
    (c,) = [x for x in a["alerts"] if x["kind"] == "contention"]
    assert (c["gpu"], c["gi"], c["ci"], c["ranks"]) == (0, 1, 0, [0, 1])
    assert c["message"].startswith("GPU 0 MIG 3g.40gb (GI 1): ranks 0 and 1 share this MIG slice")
    assert "MIG-" in c["hint"] and c["severity"] == "warning"  # three ranks for two slices: forced
    assert not [x for x in b["alerts"] + g["alerts"] if x["kind"] == "contention"]
    assert r.watch.worker_gpu(0)["shared_with"] == [1] and r.watch.worker_gpu(2)["shared_with"] == []
    (ev,) = r.emitted("contention")
    assert (ev["gpu"], ev["gi"], ev["ci"]) == (0, 1, 0)


def test_ranks_without_a_cuda_view_are_placed_on_their_slice_by_pid(rig):
    r = rig(on_slices([{"pid": "rank:0", "mem": 10 * GiB}], [{"pid": "rank:1", "mem": 12 * GiB}]))
    r.tick(n=1)
    assert [(r.watch.worker_gpu(k)["mig"]["gi"], r.watch.worker_gpu(k)["mapped_by"]) for k in (0, 1)] == [
        (1, "pid"), (2, "pid")]
    assert "contention" not in kinds(r.gpus())


def test_a_mig_uuid_in_cuda_visible_devices_is_its_slice_not_its_gpu(rig):
    r = rig(on_slices([], []), env={"CUDA_VISIBLE_DEVICES": "MIG-bbbb"})
    assert r.watch.visible == {(0, 2, 0)}
    for cvd, want in (("0", {(0, 1, 0), (0, 2, 0)}), ("MIG-GPU-a100/1/0", {(0, 1, 0)}), ("MIG-aa", {(0, 1, 0)}),
                      ("GPU-a100", {(0, 1, 0), (0, 2, 0)})):
        assert ranks.visible_keys({"CUDA_VISIBLE_DEVICES": cvd}, r.watch.probe.uuid_keys,
                                  {0: [(0, 1, 0), (0, 2, 0)]}) == want, cvd


@pytest.mark.root("reading a MIG GPU's own memory, root's")
def test_the_timeline_has_each_slice_and_each_rank_on_its_slice(rig, tmp_path):
    r = rig(on_slices([{"pid": "rank:0", "mem": 10 * GiB}], [{"pid": "rank:1", "mem": 12 * GiB}]), timeline=True)
    r.tick(n=2)
    ticks, marks = r.watch.timeline_store.window(600)
    gpus, rks = ticks[-1]["gpus"], ticks[-1]["ranks"]
    assert [(x["index"], x.get("gi"), x["mem_used"]) for x in gpus] == [
        (0, None, 22 * GiB + GiB // 2), (0, 1, 10 * GiB + GiB // 2), (0, 2, 12 * GiB)]
    assert [(x["rank"], x["gpu"], x.get("gi"), x["nvml"]) for x in rks] == [(0, 0, 1, 10 * GiB), (1, 0, 2, 12 * GiB)]
    started = [m for m in marks if m["kind"] == "proc_started"]
    assert {(m["gi"], m["text"].split(" on ")[-1]) for m in started} == {
        (1, "GPU 0 MIG 3g.40gb (GI 1)"), (2, "GPU 0 MIG 3g.40gb (GI 2)")}


def test_a_slice_filling_up_is_named_by_its_slice(rig):
    r = rig(on_slices([{"pid": "rank:0", "mem": 38 * GiB}], [{"pid": "rank:1", "mem": 2 * GiB}]))
    r.tick(n=2)
    (g,) = r.gpus()
    high = [a for v in leaves(r.gpus()) for a in v["alerts"] if a["kind"] == "memory_high"]
    assert [a["gi"] for a in high] == [1]
    assert high[0]["message"].startswith("GPU 0 MIG 3g.40gb (GI 1) memory at 96% (38.5 GiB of 40.0 GiB)")
    assert not [a for a in g["alerts"] if a["kind"] == "memory_high"]  # 50% of the whole GPU: nothing to say
