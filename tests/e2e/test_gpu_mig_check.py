"""scripts/gpu-check's MIG half (scripts/gpu_mig.py) where there is no GPU: its checks, run on the
status of real runs on the stand-in libnvidia-ml.so.1 (an A100 in MIG mode) with scripted
allocator views naming each rank's slice, hold where they should and fail where they should.
On a GPU in MIG mode the script runs scripts/gpu_alloc.py on real slices instead."""
from __future__ import annotations

import importlib.util

import pytest

from tests.helpers import ROOT, wait_for
from tests.libnvml import loaded
from tests.record import WORKER
from tests.supervisor.test_gpu_run import gpu_env, view

pytestmark = [pytest.mark.e2e]
GiB = 1 << 30
_spec = importlib.util.spec_from_file_location("gpu_mig", ROOT / "scripts" / "gpu_mig.py")
assert _spec is not None and _spec.loader is not None
gpu_mig = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_mig)

A100 = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100", "mem_total": 80 * GiB, "mig": [
    {"uuid": "MIG-aaaa", "gi": 1, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB},
    {"uuid": "MIG-bbbb", "gi": 2, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB}]}


def run_on(headless, tmp_path, libnvml, monkeypatch, slots: list[int]):
    """Rank r on slice slots[r]; the MIG devices as the script finds them; the settled status."""
    procs: list[list] = [[], []]
    for r, slot in enumerate(slots):
        procs[slot].append({"pid": f"rank:{r}", "mem": (r + 1) * GiB})
    data = {"gpus": [A100], "frames": [{"gpus": [{"slices": [{"processes": p} for p in procs]}]}]}
    with loaded(libnvml, monkeypatch, tmp_path, data):
        migs = gpu_mig.mig_devices()
    uuids = [m["uuid"] for m in A100["mig"]]
    env = gpu_env(libnvml, tmp_path, data, cuda={str(r): [view(uuids[s], GiB // 2, GiB // 2)] for r, s in enumerate(slots)},
                   CHILD="-1")
    run = headless(WORKER, n=2, opts=["--gpu-interval", "0.2"], env=env)

    def settled():
        st = run.status()
        ws = [w["gpu"] for w in st["workers"]]
        ok = len(ws) == 2 and all(w and w["mapped_by"] == "uuid" and w["mem_bytes"] for w in ws)
        return st if ok and (len(set(slots)) == 2 or any(
            a["kind"] == "contention" for s in st["gpus"][0]["slices"] for a in s["alerts"])) else None
    return migs, wait_for(settled, timeout=90, what="both ranks on their slices")


def test_the_check_holds_for_two_ranks_on_two_slices(headless, tmp_path, libnvml, monkeypatch):
    migs, st = run_on(headless, tmp_path, libnvml, monkeypatch, [0, 1])
    assert [(m["gpu"], m["uuid"], m["gi"], m["ci"], m["total"]) for m in migs] == [
        (0, "MIG-aaaa", 1, 0, 40 * GiB), (0, "MIG-bbbb", 2, 0, 40 * GiB)]
    assert gpu_mig.two_slices(st, migs) == []
    assert gpu_mig.one_slice(st, migs[0])  # no contention there: the one-slice check fails it


def test_the_check_holds_for_two_ranks_on_one_slice_and_tells_it_from_two(headless, tmp_path, libnvml, monkeypatch):
    migs, st = run_on(headless, tmp_path, libnvml, monkeypatch, [0, 0])
    assert gpu_mig.one_slice(st, migs[0]) == []
    fails = gpu_mig.two_slices(st, migs)
    assert any(f.startswith("rank 1: on (0, 1, 'MIG-aaaa', 'uuid')") for f in fails)
    assert any(f.startswith("contention across slices: GPU 0 MIG 3g.40gb (GI 1)") for f in fails)
