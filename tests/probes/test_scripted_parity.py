"""The two NVML stand-ins play one scenario alike: the Python scripted backend
(testing.nvml, MPWATCH_SCRIPTED_NVML: the benches' and the recorders') and the C
stand-in libnvidia-ml.so.1 under the real backend and nvidia-ml-py (testing.libnvml) give the
GPU probe the same GPUs (names, UUIDs, MIG slices with their instance ids and profiles, memory
with the driver's reserve apart, SM clocks, the reasons they are held back, processes routed to
their slice, NVML's refusals in the same words), as root and as uid 65534, whom a MIG GPU
refuses its own memory and process list; and the GPU watcher builds the same views from
either."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from mpwatch.testing.libnvml import SCRIPT_ENV
from mpwatch.testing.libnvml.script import write_script
from tests.record import unused_pid
from tests.supervisor.gpu_rig import Rig, cuda

GiB = 1 << 30
MiB = 1 << 20

A100 = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa", "mem_total": 80 * GiB, "mig": [
    {"uuid": "MIG-1111", "gi": 1, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB},
    {"uuid": "MIG-2222", "gi": 2, "ci": 0, "profile": "2g.20gb", "mem_total": 20 * GiB},
    "MIG-3333"]}  # a UUID alone: the defaults (GI 3, CI 0, 1g.10gb, an eighth of the GPU)
# Processes NVML lists that are no process here: pids past pid_max, which no process can have (a
# fixed small pid is a real process from time to time where pids wrap, seen by one view, not the other).
GHOST = unused_pid()


def scenario(first: object, second: object) -> dict:
    """An A100 in MIG mode (its SM clock held by the power cap) with `first` on its first slice
    and `second` on its second; an H100 held back by heat; a GPU whose clocks and reasons fail."""
    return {"gpus": [A100, {"name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * GiB}, {"mem_total": 24 * GiB}],
            "frames": [{"gpus": [
                {"temperature": 50, "power_w": 210.5, "sm_clock": 1275, "sm_clock_max": 1410,
                 "throttle": ["sw_power_cap"], "slices": [
                     {"processes": [{"pid": first, "mem": 5 * GiB}], "reserved": 100 * MiB,
                      "extra_used": 256 * MiB},
                     {"processes": [{"pid": second, "mem": 7 * GiB}]},
                     {"processes": [{"pid": GHOST, "mem": None}], "extra_used": GiB}]},
                {"util_gpu": 97, "util_mem": 40, "temperature": 83, "power_w": 690, "reserved": 512 * MiB,
                 "sm_clock": 1100, "sm_clock_max": 1980,
                 "throttle": ["sw_thermal_slowdown", "hw_thermal_slowdown"],
                 "processes": [{"pid": "self", "mem": 30 * GiB, "sm": 88}, {"pid": GHOST + 1, "mem": GiB}]},
                {"util_gpu": 5,
                 "fail": ["clocks:NOT_SUPPORTED", "throttle:GPU_IS_LOST", "power:NO_PERMISSION"]}]}]}


PROBE_BOTH = """
import dataclasses, json, os, sys
from mpwatch.probes import gpu

def plain(x):
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items() if k != "ts"}
    return [plain(v) for v in x] if isinstance(x, (list, tuple)) else x

out = {"pid": os.getpid(), "ppid": os.getppid()}
for kind, scenario in (("scripted", sys.argv[1]), ("libnvml", None)):
    backend, why = gpu.open_backend(scenario)
    assert why is None, why
    probe = gpu.GpuProbe(backend)
    probe.open()
    samples = [probe.sample(with_processes=True) for _ in range(2)]  # the second: what is not asked again
    out[kind] = plain({"keys": probe.uuid_keys, "devices": [(d.name, d.uuid, d.na) for d in probe.devices],
                       "slots": [[dataclasses.asdict(s.id), s.uuid, s.name]
                                 for d in probe.devices for s in d.slots],
                       "samples": [[dataclasses.asdict(s) for s in ss] for ss in samples]})
    probe.close()
print(json.dumps(out))
"""


def _both(run, folder, data) -> tuple[dict, dict, dict]:
    """What the probe read through each stand-in of one scenario, in one process run by `run`,
    and that process's pid and parent's."""
    path = folder / "scenario.json"
    path.write_text(json.dumps(data))
    script = write_script(data, folder / "script.txt")
    res = run(path, {SCRIPT_ENV: str(script), "LD_LIBRARY_PATH": str(folder / "lib")})
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    out = json.loads(res.stdout)
    return out["scripted"], out["libnvml"], {"self": out["pid"], "parent": out["ppid"]}


def _as_root(path, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE_BOTH, str(path)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, **env))


def test_root_reads_the_same_gpus_through_either_stand_in(libnvml, tmp_path):
    shutil.copytree(libnvml, tmp_path / "lib")
    scripted, c, pids = _both(_as_root, tmp_path, scenario("self", "parent"))
    assert scripted == c
    # and they read what the scenario says (not merely alike)
    a100, h100, odd = c["samples"][1]
    assert [s["mig"] for s in a100["slices"]] == [{"gi": 1, "ci": 0, "profile": "3g.40gb"},
                                                   {"gi": 2, "ci": 0, "profile": "2g.20gb"},
                                                   {"gi": 3, "ci": 0, "profile": "1g.10gb"}]
    first, second, third = a100["slices"]
    assert (first["mem_used"], first["mem_reserved"], first["processes"]) == (
        5 * GiB + 256 * MiB, 100 * MiB, [[pids["self"], 5 * GiB]])
    assert second["processes"] == [[pids["parent"], 7 * GiB]] and third["processes"] == [[GHOST, None]]
    assert (third["mem_total"], third["name"], third["uuid"]) == (
        10 * GiB, "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "MIG-3333")
    assert (a100["sm_clock_mhz"], a100["throttle_reasons"], a100["errors"]["utilization"]) == (
        1275, ["sw_power_cap"], "n/a on MIG")
    assert (h100["sm_clock_mhz"], h100["sm_clock_max_mhz"], h100["mem_reserved"], h100["proc_util"]) == (
        1100, 1980, 512 * MiB, {str(pids["self"]): 88})
    assert h100["throttle_reasons"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert odd["errors"] == {"clocks": "not supported on this GPU or driver",
                             "throttle": "the GPU has fallen off the bus", "power": "needs root"}
    assert c["devices"][2][2] == {"clocks": "not supported on this GPU or driver"}  # not asked again
    assert c["keys"]["MIG-3333"] == [0, 3, 0] and c["keys"]["MIG-GPU-aaaa/2/0"] == [0, 2, 0]


def test_a_user_is_refused_the_same_through_either_stand_in(nobody, libnvml):
    folder = nobody.shared("parity")
    shutil.copytree(libnvml, folder / "lib")

    def as_nobody(path, env):
        return nobody.python("-c", PROBE_BOTH, path, env=env)
    scripted, c, _ = _both(as_nobody, folder, scenario("self", "parent"))  # parent: root's setpriv
    assert scripted == c
    a100 = c["samples"][1][0]
    assert a100["mem_used"] is None and a100["processes"] is None
    assert a100["errors"]["memory"] == a100["errors"]["processes"] == "needs root on this MIG GPU"
    first, second, _ = a100["slices"]
    assert first["processes"][0][1] == 5 * GiB and second["processes"][0][1] is None  # root's: not shown
    assert second["errors"]["process_memory"] == "needs root on this MIG GPU for another user's process"


@pytest.fixture
def rigs(tmp_path, libnvml, monkeypatch):
    made: list[Rig] = []

    def make(data, lib):
        folder = tmp_path / ("c" if lib else "py")
        folder.mkdir()
        r = Rig(folder, data, lib=libnvml if lib else None, monkeypatch=monkeypatch)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def _view(r: Rig) -> list[dict]:
    """The rig's GPU views with its own ranks' pids as their ranks, and the times apart."""
    by_pid = {r.pid(k): f"rank {k}" for k in range(len(r.procs))}

    def plain(x):
        if isinstance(x, dict):
            return {k: by_pid.get(v, v) if k == "pid" else plain(v) for k, v in x.items()
                    if k not in ("ts", "processes_ts", "since", "history")}
        return [plain(v) for v in x] if isinstance(x, list) else x
    return plain(r.gpus())


def _differences(a: object, b: object, where: str = "") -> list[str]:
    """Where two views differ, path by path (a whole view in an assertion hides it)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in _differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: scripted {a!r}, stand-in {b!r}"]


def test_the_watcher_builds_the_same_views_from_either(rigs):
    data = scenario("rank:0", "rank:1")
    views = []
    for lib in (False, True):
        r = rigs(data, lib)
        r.cuda = {0: cuda("MIG-1111", 4 * GiB, 5 * GiB), 1: cuda("MIG-2222", 6 * GiB, 7 * GiB)}
        r.tick(n=3)
        views.append(_view(r))
    assert views[0] == views[1], _differences(views[0], views[1])
    a100 = views[1][0]
    assert [s["ranks"] for s in a100["slices"]] == [[0], [1], []]
    assert a100["throttle_reasons"] == ["sw_power_cap"] and views[1][1]["sm_clock_mhz"] == 1100
