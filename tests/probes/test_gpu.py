"""The GPU probe: backends, per-value N/A, the one-line reasons. NVML itself is the only
thing faked here: a scripted backend (testing.nvml), a stand-in libnvidia-ml.so.1
under the real NvmlBackend and nvidia-ml-py (testing.libnvml), or a stand-in pynvml module."""
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import types

import psutil
import pynvml
import pytest

from mpwatch.contract import BY_KEY
from mpwatch.probes import gpu, nvml
from mpwatch.testing import nvml as nvml_scripted
from mpwatch.testing.libnvml import SCRIPT_ENV
from tests.helpers import wait_for
from tests.libnvml import loaded

GiB = 1 << 30


def nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


def scenario(tmp_path, data) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    return str(path)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


# ------------------------------------------------------------------ reasons ----
@pytest.mark.parametrize("code,expect", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no NVIDIA GPU found"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "driver/bindings mismatch"),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "driver/bindings mismatch"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    (pynvml.NVML_ERROR_UNKNOWN, "NVML failed to start"),
])
def test_each_nvml_start_failure_is_one_clear_line(code, expect):
    line = gpu.reason_for(pynvml.NVMLError(code))
    assert expect in line and "\n" not in line


def test_a_bindings_mismatch_error_is_named_so():
    line = gpu.reason_for(pynvml.NVMLLibraryMismatchError("unversioned function called"))
    assert line.startswith("driver/bindings mismatch:")


def test_real_backend_without_a_driver_gives_the_clear_line():
    if nvml_present():
        pytest.skip("this machine has an NVIDIA driver")
    backend, why = gpu.open_backend(None)
    assert backend is None
    assert why.startswith("NVML library not found") and "\n" not in why


def test_without_the_library_the_bindings_are_never_imported():
    """A supervisor on a machine without the driver says so without importing pynvml (25 ms of
    its start), and so does the -n default, which counts the GPUs: the same line as pynvml's."""
    if nvml_present():
        pytest.skip("this machine has an NVIDIA driver")
    code = ("import json, sys\nfrom mpwatch.probes import gpu\nfrom mpwatch.cli import launch\n"
            "backend, why = gpu.open_backend(None)\n"
            "print(json.dumps([backend is None, why, launch.default_nprocs(), 'pynvml' in sys.modules]))")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    none, why, nprocs, imported = json.loads(out.stdout)
    assert none and why == gpu.reason_for(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert nprocs == 2 and not imported


# ------------------------------------------------- both stand-ins, one scenario ----
# "python": testing.nvml (a backend); "libnvml": the stand-in libnvidia-ml.so.1
# (testing.libnvml) under the real NvmlBackend and nvidia-ml-py.
FAILED = {"python": "scripted failure", "libnvml": "the driver failed without saying why"}  # NVML_ERROR_UNKNOWN


@pytest.fixture(params=["python", "libnvml"])
def stand_in(request, tmp_path, monkeypatch):
    """open(scenario) -> (backend, why) on either stand-in; every backend is shut down after."""
    opened = []
    with contextlib.ExitStack() as stack:
        if request.param == "libnvml":
            lib = request.getfixturevalue("libnvml")

        def open_(data):
            if request.param == "python":
                backend, why = gpu.open_backend(scenario(tmp_path, data))
            else:
                stack.enter_context(loaded(lib, monkeypatch, tmp_path, data))
                backend, why = gpu.open_backend(None)
            opened.append(backend)
            return backend, why
        open_.kind = request.param
        yield open_
        for b in opened:
            if b is not None:
                b.shutdown()


def probe_of(stand_in, data):
    backend, why = stand_in(data)
    assert why is None, why
    probe = gpu.GpuProbe(backend)
    probe.open()
    return probe


def test_a_scenario_drives_every_value(stand_in):
    a, b = probe_of(stand_in, {
        "gpus": [{"name": "Fake A", "mem_total": 16 * GiB}, {"name": "Fake B", "mem_total": 8 * GiB}],
        "frames": [{"at": 0, "gpus": [
            {"util_gpu": 80, "util_mem": 30, "temperature": 61, "power_w": 250.25, "extra_used": GiB,
             "processes": [{"pid": 4242, "mem": 2 * GiB}, {"pid": "self", "mem": GiB}]},
            {"mem_used": 5, "processes": []}]}]}).sample(with_processes=True)
    assert (a.index, a.name, a.mem_used, a.mem_total) == (0, "Fake A", 4 * GiB, 16 * GiB)
    assert (a.util_gpu, a.util_mem, a.temperature, a.power_w) == (80, 30, 61, 250.2)
    assert a.processes == [(4242, 2 * GiB), (os.getpid(), GiB)] and a.errors == {}
    assert (b.name, b.mem_used, b.processes) == ("Fake B", 5, [])


def test_the_backend_kind_says_which_stand_in(stand_in):
    backend, _ = stand_in({"gpus": [{}]})
    assert backend.kind == {"python": "scripted", "libnvml": "nvml"}[stand_in.kind]


def test_processes_are_only_asked_for_when_due(stand_in):
    probe = probe_of(stand_in, {"gpus": [{}], "frames": [{"gpus": [{"processes": [{"pid": 1, "mem": 1}]}]}]})
    (s,) = probe.sample(with_processes=False)
    assert s.processes is None and s.mem_used == 1
    (s,) = probe.sample(with_processes=True)
    assert s.processes == [(1, 1)]


def test_a_failing_call_is_na_for_that_value_only(stand_in):
    probe = probe_of(stand_in, {"gpus": [{"mem_total": GiB}], "frames": [{"gpus": [
        {"util_gpu": 10, "temperature": 50, "fail": ["temperature", "processes", "power"]}]}]})
    (s,) = probe.sample(with_processes=True)
    assert s.temperature is None and s.power_w is None and s.processes is None
    assert s.util_gpu == 10 and s.mem_total == GiB
    assert set(s.errors) == {"temperature", "processes", "power"}
    assert FAILED[stand_in.kind] in s.errors["temperature"]


def test_frames_follow_the_scenario_clock(tmp_path):
    path = scenario(tmp_path, {"gpus": [{}], "frames": [
        {"at": 0, "gpus": [{"util_gpu": 1}]}, {"at": 5, "gpus": [{"util_gpu": 2}]},
        {"at": 10, "gpus": [{"util_gpu": 3}]}]})
    clock = Clock()
    backend = nvml_scripted.ScriptedNvml(path, clock=clock)
    backend.init()
    seen = []
    for dt in (0, 4.9, 5.0, 9.0, 11.0, 1000.0):
        clock.t = 100.0 + dt
        seen.append(backend.counter(0, BY_KEY["util_gpu"]))
    assert seen == [1, 1, 2, 2, 3, 3]


def test_the_librarys_frames_follow_its_own_clock(stand_in):
    backend, _ = stand_in({"gpus": [{}], "frames": [{"at": 0, "gpus": [{"util_gpu": 1}]},
                                                   {"at": 0.5, "gpus": [{"util_gpu": 2}]},
                                                   {"at": 3600, "gpus": [{"util_gpu": 3}]}]})
    h = backend.handle(0)
    seen = [backend.counter(h, BY_KEY["util_gpu"])]
    wait_for(lambda: seen.append(backend.counter(h, BY_KEY["util_gpu"])) or seen[-1] == 2,
             what="the frame from 0.5 s")
    assert seen == sorted(seen) and set(seen) <= {1, 2}  # in order, and never the frame an hour on


@pytest.mark.parametrize("data,expect", [
    ({"gpus": [{}], "init_error": "driver/bindings mismatch: scripted"}, "driver/bindings mismatch: scripted"),
    ({"gpus": []}, "no NVIDIA GPU found"),
    ([1, 2], "unreadable"),
])
def test_scripted_start_failures_are_one_line(tmp_path, data, expect):
    backend, why = gpu.open_backend(scenario(tmp_path, data))
    assert backend is None and expect in why and "\n" not in why


@pytest.mark.parametrize("data,expect", [
    ({"gpus": [{}], "init_error": "DRIVER_NOT_LOADED"}, "no NVIDIA GPU found: the NVIDIA driver is not loaded"),
    ({"gpus": [{}], "init_error": "LIB_RM_VERSION_MISMATCH"}, "driver/bindings mismatch: the NVML library"),
    ({"gpus": [{}], "init_error": "NO_PERMISSION"}, "NVML refused access"),
    ({"gpus": []}, "no NVIDIA GPU found"),
])
def test_the_librarys_start_failures_are_one_line(libnvml, tmp_path, monkeypatch, data, expect):
    with loaded(libnvml, monkeypatch, tmp_path, data):
        backend, why = gpu.open_backend(None)
    assert backend is None and why.startswith(expect) and "\n" not in why


def test_a_missing_or_broken_scenario_file_is_one_line(tmp_path):
    backend, why = gpu.open_backend(str(tmp_path / "nope.json"))
    assert backend is None and "unreadable" in why
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    backend, why = gpu.open_backend(str(bad))
    assert backend is None and "unreadable" in why and "\n" not in why


def test_the_library_without_its_script_is_a_machine_without_a_driver(libnvml, tmp_path, monkeypatch):
    with loaded(libnvml, monkeypatch, tmp_path, {"gpus": [{}]}):
        monkeypatch.delenv(SCRIPT_ENV)
        backend, why = gpu.open_backend(None)
        assert backend is None and why == "no NVIDIA GPU found: the NVIDIA driver is not loaded"
        monkeypatch.setenv(SCRIPT_ENV, str(tmp_path / "nope.txt"))
        backend, why = gpu.open_backend(None)
        assert backend is None and why == "NVML failed to start: Unknown Error"


def test_rank_names_resolve_to_this_processes_children(stand_in):
    import subprocess
    import sys

    parent = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
              "time.sleep(60)']); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", parent], env=dict(os.environ, MPWATCH_RANK="3"))
    try:
        grand = wait_for(lambda: psutil.Process(child.pid).children(), what="the rank's own child")[0].pid
        probe = probe_of(stand_in, {"gpus": [{}], "frames": [{"gpus": [{"processes": [
            {"pid": "rank:3", "mem": 1}, {"pid": "rank:3/child", "mem": 2}, {"pid": "rank:4", "mem": 3},
            {"pid": "parent", "mem": 4}, {"pid": 77, "mem": 5}, {"pid": "junk", "mem": 6}]}]}]})
        (s,) = probe.sample(with_processes=True)
        assert s.processes == [(child.pid, 1), (grand, 2), (os.getppid(), 4), (77, 5)]
        assert s.mem_used == 21  # every listed process counts, found or not
    finally:
        for p in psutil.Process(child.pid).children():
            p.kill()
        child.kill()
        child.wait()


def test_scripted_rank_names_resolve_to_this_processes_children():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, MPWATCH_RANK="3"))
    try:
        assert nvml_scripted.scenario_pid("rank:3") == child.pid
        assert nvml_scripted.scenario_pid("rank:4") is None
        assert nvml_scripted.scenario_pid("parent") == os.getppid()
        assert nvml_scripted.scenario_pid(77) == 77 and nvml_scripted.scenario_pid("junk") is None
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- real backend ----
def fake_pynvml(**overrides):
    """A stand-in for the pynvml module: the real NvmlBackend code runs against it."""
    ns = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError, NVMLLibraryMismatchError=pynvml.NVMLLibraryMismatchError,
        NVML_ERROR_FUNCTION_NOT_FOUND=pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        NVML_ERROR_NOT_FOUND=pynvml.NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED=pynvml.NVML_ERROR_NOT_SUPPORTED,
        NVML_SUCCESS=pynvml.NVML_SUCCESS,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}", nvmlDeviceGetName=lambda h: b"NVIDIA Test",
        nvmlDeviceGetUUID=lambda h: f"GPU-test-{h}",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=3 * GiB, total=80 * GiB, free=77 * GiB),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=55, memory=20),
        nvmlDeviceGetTemperature=lambda h, s: 64,
        nvmlDeviceGetPowerUsage=lambda h: 123456,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=10, usedGpuMemory=GiB),
                                                        types.SimpleNamespace(pid=11, usedGpuMemory=None)],
    )
    for k, v in overrides.items():
        setattr(ns, k, v)
    return ns


def real_backend(nv):
    b = nvml.NvmlBackend()
    b.nv = nv
    return b


def test_real_backend_reads_and_converts_units():
    probe = gpu.GpuProbe(real_backend(fake_pynvml()))
    probe.open()
    (s,) = probe.sample(with_processes=True)
    assert (s.name, s.mem_used, s.mem_total, s.util_gpu, s.util_mem) == ("NVIDIA Test", 3 * GiB, 80 * GiB, 55, 20)
    assert s.temperature == 64 and s.power_w == 123.5  # milliwatts -> watts
    assert s.processes == [(10, GiB), (11, None)]  # None: the driver cannot tell


def test_real_backend_falls_back_to_v2_processes_on_an_older_driver():
    calls = []

    def unversioned(h):
        calls.append("v3")
        raise pynvml.NVMLLibraryMismatchError("unversioned function called")

    def v2(h):
        calls.append("v2")
        return [types.SimpleNamespace(pid=5, usedGpuMemory=7)]

    b = real_backend(fake_pynvml(nvmlDeviceGetComputeRunningProcesses=unversioned,
                                 nvmlDeviceGetComputeRunningProcesses_v2=v2))
    assert b.processes("h0") == [(5, 7)]
    assert b.processes("h0") == [(5, 7)]
    assert calls == ["v3", "v2", "v2"]  # the working variant is remembered


def test_real_backend_unsupported_values_are_na_and_sampling_goes_on():
    def not_supported(*a):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def lost(*a):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    probe = gpu.GpuProbe(real_backend(fake_pynvml(nvmlDeviceGetPowerUsage=not_supported,
                                                  nvmlDeviceGetComputeRunningProcesses=lost)))
    probe.open()
    for _ in range(3):
        (s,) = probe.sample(with_processes=True)
        assert s.power_w is None and s.processes is None and s.mem_used == 3 * GiB
        assert s.errors["power"] == "not supported on this GPU or driver"
        assert s.errors["processes"] == "the GPU has fallen off the bus"


def test_a_device_whose_handle_fails_is_skipped_and_said():
    def handle(i):
        if i == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return f"h{i}"

    probe = gpu.GpuProbe(real_backend(fake_pynvml(nvmlDeviceGetCount=lambda: 2,
                                                  nvmlDeviceGetHandleByIndex=handle)))
    probe.open()
    assert [d.index for d in probe.devices] == [0]
    assert probe.status.startswith("GPU 1:") and "fallen off the bus" in probe.status


# ------------------------------------------------------- UUIDs and SM utilization ----
def test_uuids_and_mig_instances_map_to_nvml_indices(stand_in):
    probe = probe_of(stand_in, {"gpus": [{"uuid": "GPU-1111"}, {"uuid": "GPU-2222", "mig": ["MIG-aaaa", "MIG-bbbb"]},
                                         {}]})
    assert [d.uuid for d in probe.devices] == ["GPU-1111", "GPU-2222", "GPU-fake-2"]
    new = {"GPU-1111": 0, "GPU-2222": 1, "MIG-aaaa": 1, "MIG-bbbb": 1, "GPU-fake-2": 2}
    assert {u: i for u, i in probe.uuid_index.items() if "/" not in u} == new  # and the older MIG names
    assert [s.uuid for s in probe.sample(with_processes=False)] == ["GPU-1111", "GPU-2222", "GPU-fake-2"]


def test_process_sm_utilization_present_absent_and_failing(stand_in):
    probe = probe_of(stand_in, {"gpus": [{}, {}, {}], "frames": [{"gpus": [
        {"processes": [{"pid": 11, "mem": 1, "sm": 70}, {"pid": 12, "mem": 1}]},
        {"proc_util": False, "processes": [{"pid": 13, "mem": 1, "sm": 5}]},
        {"fail": ["proc_util"], "processes": [{"pid": 14, "mem": 1, "sm": 5}]}]}]})
    a, b, c = probe.sample(with_processes=True)
    assert a.proc_util == {11: 70} and "proc_util" not in a.errors  # no sample for 12: it ran no kernel
    assert b.proc_util is None and "not supported" in b.errors["proc_util"] and b.processes == [(13, 1)]
    assert c.proc_util is None and FAILED[stand_in.kind] in c.errors["proc_util"]
    a, b, c = probe.sample(with_processes=False)
    assert a.proc_util is None and "proc_util" not in a.errors  # only asked with the process list
    assert [d.proc_util_ok for d in probe.devices] == [True, False, True]  # N/A for good; a failure is retried


def util_sample(pid, ts, sm):
    return types.SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)


def test_real_backend_averages_process_samples_since_the_last_one_seen():
    seen = []

    def samples(h, since):
        seen.append(since)
        if len(seen) == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # nothing ran since
        return [util_sample(10, 100, 40), util_sample(10, 200, 60), util_sample(11, 150, 130),
                util_sample(12, 50, 99)]  # 130: a driver's glitch, clamped; ts 50: older than asked

    probe = gpu.GpuProbe(real_backend(fake_pynvml(nvmlDeviceGetProcessUtilization=samples)))
    probe.open()
    probe.devices[0].util_seen_us = 60
    (s,) = probe.sample(with_processes=True)
    assert s.proc_util == {10: 50, 11: 100} and probe.devices[0].util_seen_us == 200
    (s,) = probe.sample(with_processes=True)
    assert s.proc_util == {} and seen == [60, 200]


def test_real_backend_without_process_samples_is_na_and_not_asked_again():
    calls = []

    def unsupported(h, since):
        calls.append(since)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    probe = gpu.GpuProbe(real_backend(fake_pynvml(nvmlDeviceGetProcessUtilization=unsupported)))
    probe.open()
    for _ in range(3):
        (s,) = probe.sample(with_processes=True)
        assert s.proc_util is None and "not supported" in s.errors["proc_util"]
        assert s.processes == [(10, GiB), (11, None)]  # the process list itself goes on
    assert len(calls) == 1


def test_real_backend_reads_uuids_and_mig_instances():
    nv = fake_pynvml(NVML_DEVICE_MIG_ENABLE=1, nvmlDeviceGetMigMode=lambda h: (1, 1),
                     nvmlDeviceGetMaxMigDeviceCount=lambda h: 3,
                     nvmlDeviceGetMigDeviceHandleByIndex=lambda h, i: f"{h}/mig{i}" if i < 2 else _raise())
    nv.nvmlDeviceGetUUID = lambda h: (f"MIG-{h}" if "/" in h else f"GPU-{h}").encode()
    probe = gpu.GpuProbe(real_backend(nv))
    probe.open()
    assert probe.devices[0].uuid == "GPU-h0"
    assert probe.uuid_index == {"GPU-h0": 0, "MIG-h0/mig0": 0, "MIG-h0/mig1": 0}


def _raise():
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
