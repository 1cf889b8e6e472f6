"""scripts/gpu-check's memory half (scripts/gpu_memory.py) where there is no GPU: the same run (ctl
memory 0, then the OOM) and
the same checks, on the stand-in libnvidia-ml.so.1 (the GPU's processes) and the scripted torch
(testing.torch_cuda: rank 0 allocates 1 GiB at a time past what is free, through torch's own
calls); they hold on that run and fail where they should. On a GPU the script runs real torch."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from tests.helpers import ROOT
from tests.libnvml import nvml_env

pytestmark = [pytest.mark.e2e]
GiB, MiB = 1 << 30, 1 << 20
_spec = importlib.util.spec_from_file_location("gpu_memory", ROOT / "scripts" / "gpu_memory.py")
assert _spec is not None and _spec.loader is not None
gpu_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_memory)


def test_the_memory_check_holds_on_a_stand_in_oom_and_fails_where_it_should(tmp_path, libnvml):
    nvml = {"gpus": [{"mem_total": 80 * GiB, "uuid": "GPU-aaaa"}], "frames": [{"gpus": [
        {"processes": [{"pid": "rank:0", "mem": 71 * GiB}, {"pid": "rank:1", "mem": 4 * GiB}]}]}]}
    frame = {"at": 0, "device": 0, "uuid": "GPU-aaaa", "max_allocated": 70 * GiB}
    cuda = tmp_path / "cuda.json"  # rank 0's cache nearly all allocated: its 256 MiB is a segment of its own
    cuda.write_text(json.dumps({"ranks": {
        "0": [{**frame, "allocated": 70 * GiB, "reserved": 70 * GiB + 64 * MiB, "total": 80 * GiB, "free": GiB}],
        "1": [{**frame, "allocated": 3 * GiB, "reserved": 3 * GiB}]}}))
    env = nvml_env(libnvml, tmp_path, nvml, base=dict(os.environ, MPWATCH_SCRIPTED_CUDA=str(cuda)))
    run_dir, status, why = gpu_memory.run(120.0, 4096, env)
    assert why is None, why
    assert gpu_memory.asked_checks(run_dir) == []  # ctl memory 0, before the OOM
    assert gpu_memory.oom_checks(run_dir, status) == []
    failed = gpu_memory.oom_checks(run_dir, status, chunk=2 * GiB)  # the check sees what it asked
    assert failed and failed[0].startswith(f"asked {GiB} (want {2 * GiB})")
    snap = next(e for e in gpu_memory.events(run_dir) if e.get("kind") == "oom")["oom"]["snapshot"]
    assert gpu_memory.snapshot_checks(snap, fixture="elsewhere.py") == [
        f"snapshot {snap}: no block allocated from elsewhere.py (the history's stacks)"]
