"""MIG slices, the driver's refusals, memory with its reserve apart, clocks and their reasons:
probes.gpu.GpuProbe on the real backend (nvidia-ml-py) over the stand-in libnvidia-ml.so.1
(testing.libnvml). As root here; as uid 65534 in a process of its own where only another
user sees what the driver keeps from it."""
import json
import os
import shutil

import pynvml
import pytest

from mpwatch.probes import nvml_words
from mpwatch.probes.gpu_sample import MigId
from mpwatch.testing.libnvml import SCRIPT_ENV, build
from mpwatch.testing.libnvml.script import write_script

GiB = 1 << 30
MiB = 1 << 20

A100 = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa", "mem_total": 80 * GiB, "mig": [
    {"uuid": "MIG-1111", "gi": 1, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB},
    {"uuid": "MIG-2222", "gi": 2, "ci": 0, "profile": "2g.20gb", "mem_total": 20 * GiB}]}


def two_slices(first: object, second: object) -> dict:
    """A100 split in two slices: `first` (this process's, 5 GiB) and `second` (7 GiB) on them."""
    return {"gpus": [A100], "frames": [{"gpus": [{"temperature": 50, "power_w": 200, "slices": [
        {"processes": [{"pid": first, "mem": 5 * GiB}], "reserved": 100 * MiB},
        {"processes": [{"pid": second, "mem": 7 * GiB}]}]}]}]}


@pytest.mark.root("reading a MIG GPU's whole process list, root's")
def test_a_mig_gpu_is_sampled_slice_by_slice(probe):
    p = probe(two_slices("self", 4242))
    assert [slot.id for slot in p.devices[0].slots] == [MigId(1, 0, "3g.40gb"), MigId(2, 0, "2g.20gb")]
    assert p.uuid_keys["MIG-1111"] == (0, 1, 0) and p.uuid_keys["MIG-2222"] == (0, 2, 0)
    assert p.uuid_keys["MIG-GPU-aaaa/2/0"] == (0, 2, 0)  # the older spelling (before R470)
    assert p.uuid_keys["GPU-aaaa"] == (0, None, None)
    (g,) = p.sample(with_processes=True)
    # As root, the GPU's whole list, each process sent to its slice by its instance ids.
    raw = pynvml.nvmlDeviceGetComputeRunningProcesses(p.devices[0].handle)
    assert {(x.pid, x.gpuInstanceId, x.computeInstanceId) for x in raw} == {(os.getpid(), 1, 0), (4242, 2, 0)}
    a, b = g.slices
    assert (a.mig, a.uuid, a.name, a.index) == (MigId(1, 0, "3g.40gb"), "MIG-1111",
                                                "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 0)
    assert (a.mem_used, a.mem_total, a.mem_reserved, a.processes) == (5 * GiB, 40 * GiB, 100 * MiB,
                                                                      [(os.getpid(), 5 * GiB)])
    assert (b.mem_used, b.mem_total, b.processes) == (7 * GiB, 20 * GiB, [(4242, 7 * GiB)])
    assert (g.mem_used, g.mem_total, g.processes) == (12 * GiB, 80 * GiB, [])  # root: the whole GPU too
    # Utilization is not reported on MIG: said so, and never 0.
    for s in (g, a, b):
        assert s.util_gpu is None and s.proc_util is None
        assert s.errors["utilization"] == s.errors["proc_util"] == "n/a on MIG"
    assert (g.temperature, g.power_w) == (50, 200.0) and (a.temperature, a.power_w) == (None, None)
    assert "processes" not in g.errors and "memory" not in g.errors


def test_without_processes_the_slices_still_have_their_memory(probe):
    p = probe(two_slices("self", 4242))
    (g,) = p.sample(with_processes=False)
    assert [s.mem_used for s in g.slices] == [5 * GiB, 7 * GiB] and all(s.processes is None for s in g.slices)


def test_memory_v2_leaves_the_drivers_reserve_out_of_used(probe, libnvml_no_v3):
    data = {"gpus": [{"mem_total": 16 * GiB}], "frames": [{"gpus": [
        {"reserved": 500 * MiB, "processes": [{"pid": "self", "mem": 2 * GiB}]}]}]}
    (s,) = probe(data).sample(with_processes=False)
    assert (s.mem_used, s.mem_reserved, s.mem_total) == (2 * GiB, 500 * MiB, 16 * GiB)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(probe(data).devices[0].handle)
    assert v1.used == 2 * GiB + 500 * MiB  # what the code before read as the ranks'
    # A driver older than R510 has no v2: its v1, the reserve counted in, and it is not asked again.
    old = probe(data, lib=libnvml_no_v3)
    (s,) = old.sample(with_processes=False)
    assert (s.mem_used, s.mem_reserved, "memory" in s.errors) == (2 * GiB + 500 * MiB, None, False)
    assert old.devices[0].mem_v2 is False


def test_clocks_and_the_reasons_they_are_held_back(probe, libnvml_no_v3):
    data = {"gpus": [{}, {}], "frames": [{"gpus": [
        {"sm_clock": 1100, "sm_clock_max": 1980, "throttle": ["sw_power_cap", "hw_thermal_slowdown"]},
        {"fail": ["clocks:NOT_SUPPORTED", "throttle:GPU_IS_LOST"]}]}]}
    p = probe(data)
    for _ in range(2):
        a, b = p.sample(with_processes=False)
        assert (a.sm_clock_mhz, a.sm_clock_max_mhz) == (1100, 1980)
        assert a.throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]
        assert (b.sm_clock_mhz, b.throttle_reasons) == (None, None)
        assert b.errors == {"clocks": "not supported on this GPU or driver", "throttle": "the GPU has fallen off the bus"}
    assert p.devices[1].na == {"clocks": "not supported on this GPU or driver"}  # not asked again; a loss is
    # A driver older than R535 names them throttle reasons: the same bits, read by that name.
    old = probe(data, lib=libnvml_no_v3)
    a, _ = old.sample(with_processes=False)
    assert a.throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]
    assert old.backend._reasons_fn is pynvml.nvmlDeviceGetCurrentClocksThrottleReasons


def test_every_nvml_code_has_plain_words_and_the_library_names_each(probe):
    probe({"gpus": [{}]})
    codes = sorted(v for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") and isinstance(v, int))
    assert len(codes) >= 30
    for code in codes:
        named = pynvml.nvmlErrorString(code)  # what pynvml asks the library for a code it does not know
        assert named and (named != "Unknown Error") == (code != pynvml.NVML_ERROR_UNKNOWN), code
        said = nvml_words.words(pynvml.NVMLError(code))
        assert said and "Unknown Error" not in said and "NVML error" not in said, (code, said)
    assert nvml_words.words(pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION), mig=True) == "needs root on this MIG GPU"


PROBE_AS_USER = """
import dataclasses, json
from mpwatch.probes import gpu
backend, why = gpu.open_backend(None)
assert why is None, why
probe = gpu.GpuProbe(backend)
probe.open()
for _ in range(2):
    samples = probe.sample(with_processes=True)
print(json.dumps([dataclasses.asdict(s) for s in samples]))
"""


def test_a_user_is_told_what_the_mig_gpu_keeps_from_them(nobody, libnvml):
    """Uid 65534 on a MIG GPU: the whole GPU's memory and process list are root's (said once, on
    the GPU, in plain words); each slice's own memory and list are read instead, and the memory
    of root's process there is not available (said, never 16 EiB)."""
    shared = nobody.shared("nvml")
    lib = shared / "lib"
    shutil.copytree(libnvml, lib)
    script = write_script(two_slices("self", "parent"), shared / "script.txt")  # parent: root's pytest
    res = nobody.python("-c", PROBE_AS_USER, env={"LD_LIBRARY_PATH": str(lib), SCRIPT_ENV: str(script)})
    assert res.returncode == 0, res.stderr
    (g,) = json.loads(res.stdout)
    assert g["mem_used"] is None and g["processes"] is None
    assert g["errors"]["memory"] == g["errors"]["processes"] == "needs root on this MIG GPU"
    a, b = g["slices"]
    assert (a["mem_used"], b["mem_used"], a["mem_total"]) == (5 * GiB, 7 * GiB, 40 * GiB)
    (mine,), (roots,) = a["processes"], b["processes"]
    assert mine[1] == 5 * GiB and roots == [os.getpid(), None]
    assert "process_memory" not in a["errors"]
    assert b["errors"]["process_memory"] == "needs root on this MIG GPU for another user's process"
    assert "Traceback" not in res.stderr


def test_the_stand_in_refuses_a_user_only_on_a_mig_gpu(nobody, libnvml):
    """A GPU outside MIG mode answers a user everything: the refusal is MIG's, not the library's."""
    shared = nobody.shared("nvml")
    lib = shared / "lib"
    shutil.copytree(libnvml, lib)
    data = {"gpus": [{"mem_total": 8 * GiB}], "frames": [{"gpus": [{"processes": [{"pid": "parent", "mem": GiB}]}]}]}
    script = write_script(data, shared / "script.txt")
    res = nobody.python("-c", PROBE_AS_USER, env={"LD_LIBRARY_PATH": str(lib), SCRIPT_ENV: str(script)})
    assert res.returncode == 0, res.stderr
    (g,) = json.loads(res.stdout)
    assert (g["mem_used"], g["processes"], g["slices"]) == (GiB, [[os.getpid(), GiB]], [])
    assert set(g["errors"]) <= {"proc_util"}


@pytest.mark.parametrize("variant", ["full", "no_v3"])
def test_the_library_builds_without_a_warning(tmp_path, variant):
    """-Wall -Wextra clean: a warning in a stand-in is a driver behaviour nobody chose."""
    if build.missing():
        pytest.skip(build.missing())
    import subprocess

    header = build.find_header()
    cmd = [build.compiler(), "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", *build.VARIANTS[variant],
           f"-I{header.parent}", "-o", str(tmp_path / "x.so"), *(str(build.HERE / s) for s in build.SOURCES)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
