"""What only the real binding does: probes.nvml.NvmlBackend over nvidia-ml-py over the stand-in
libnvidia-ml.so.1 (testing.libnvml), built against NVIDIA's nvml.h. The versioned process
list and its fallback, NVML_VALUE_NOT_AVAILABLE, MIG handles, NVML's error codes, the
two-call buffer protocol: pynvml's own ctypes code runs on each."""
import os

import pynvml
import pytest

GiB = 1 << 30



ONE = [{"pid": "self", "mem": GiB, "sm": 30}]


def test_a_driver_without_the_v3_process_list_is_read_through_v2(probe, libnvml_no_v3):
    p = probe({"gpus": [{}], "frames": [{"gpus": [{"processes": ONE}]}]}, lib=libnvml_no_v3)
    for _ in range(2):
        (s,) = p.sample(with_processes=True)
        assert s.processes == [(os.getpid(), GiB)] and "processes" not in s.errors
    assert p.backend._procs_fn is pynvml.nvmlDeviceGetComputeRunningProcesses_v2  # remembered


def test_a_v3_that_says_function_not_found_falls_back_to_v2(probe):
    p = probe({"gpus": [{}], "frames": [{"gpus": [{"processes": ONE, "fail": ["processes_v3:FUNCTION_NOT_FOUND"]}]}]})
    (s,) = p.sample(with_processes=True)
    assert s.processes == [(os.getpid(), GiB)]
    assert p.backend._procs_fn is pynvml.nvmlDeviceGetComputeRunningProcesses_v2


def test_a_current_driver_is_read_through_v3_and_its_other_errors_are_not_a_fallback(probe):
    p = probe({"gpus": [{}, {}], "frames": [{"gpus": [{"processes": ONE},
                                                      {"processes": ONE, "fail": ["processes_v3:GPU_IS_LOST"]}]}]})
    a, b = p.sample(with_processes=True)
    assert a.processes == [(os.getpid(), GiB)]
    assert p.backend._procs_fn is pynvml.nvmlDeviceGetComputeRunningProcesses
    assert b.processes is None and b.errors["processes"] == "the GPU has fallen off the bus"


def test_memory_the_driver_cannot_tell_is_none_not_16_eib(probe):
    p = probe({"gpus": [{}], "frames": [{"gpus": [{"processes": [{"pid": "self", "mem": None},
                                                                 {"pid": 4242, "mem": 5 * GiB}]}]}]})
    (s,) = p.sample(with_processes=True)
    assert s.processes == [(os.getpid(), None), (4242, 5 * GiB)]


def test_many_processes_go_through_the_two_call_buffer_protocol(probe):
    procs = [{"pid": 100000 + i, "mem": i, "sm": i % 100} for i in range(200)]
    p = probe({"gpus": [{}], "frames": [{"gpus": [{"processes": procs}]}]})
    (s,) = p.sample(with_processes=True)
    assert s.processes == [(100000 + i, i) for i in range(200)]
    assert s.proc_util == {100000 + i: i % 100 for i in range(200)}


def test_mig_instances_map_to_their_gpu_and_a_gpu_without_mig_has_none(probe):
    p = probe({"gpus": [{"uuid": "GPU-a", "mig": ["MIG-1", "MIG-2", "MIG-3"]},
                        {"uuid": "GPU-b", "mig": []},  # MIG-capable, MIG off
                        {"uuid": "GPU-c"}]})          # no MIG at all: NOT_SUPPORTED
    assert {u: i for u, i in p.uuid_index.items() if "/" not in u} == {
        "GPU-a": 0, "MIG-1": 0, "MIG-2": 0, "MIG-3": 0, "GPU-b": 1, "GPU-c": 2}
    assert [len(d.slots) for d in p.devices] == [3, 0, 0]
    assert pynvml.nvmlDeviceGetMigMode(p.devices[0].handle) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(p.devices[2].handle)


@pytest.mark.root("reading a MIG GPU's own memory, root's")
def test_a_mig_gpus_unsupported_counters_are_na_and_sampling_goes_on(probe):
    # A GPU in MIG mode reports no utilization and no process samples (n/a on MIG, never 0, and
    # not asked); what fails otherwise is said in plain words; memory and processes work (root).
    p = probe({"gpus": [{"mig": ["MIG-1"]}], "frames": [{"gpus": [
        {"fail": ["power:NOT_SUPPORTED"], "temperature": 51,
         "slices": [{"mem_used": 3 * GiB, "processes": ONE}]}]}]})
    for _ in range(3):
        (s,) = p.sample(with_processes=True)
        assert (s.util_gpu, s.util_mem, s.power_w, s.proc_util) == (None, None, None, None)
        assert s.errors == {"utilization": "n/a on MIG", "power": "not supported on this GPU or driver",
                            "proc_util": "n/a on MIG"}
        assert (s.mem_used, s.temperature, s.processes) == (3 * GiB, 51, [])
        assert s.slices[0].processes == [(os.getpid(), GiB)]


def test_process_samples_are_read_since_the_last_one_seen(probe):
    p = probe({"gpus": [{}], "frames": [{"gpus": [{"processes": ONE}]}]})
    (s,) = p.sample(with_processes=True)
    first = p.devices[0].util_seen_us
    assert s.proc_util == {os.getpid(): 30} and first > 0
    (s,) = p.sample(with_processes=True)
    assert p.devices[0].util_seen_us > first and s.proc_util == {os.getpid(): 30}
