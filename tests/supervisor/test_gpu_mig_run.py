"""MIG in real headless runs (issue 33): the stand-in libnvidia-ml.so.1 (testing.libnvml, under
the real nvidia-ml-py) plays an A100 in MIG mode; the scripted allocator views (MPWATCH_SCRIPTED_CUDA)
name each rank's slice by its MIG UUID, as a worker whose CUDA_VISIBLE_DEVICES is MIG-… sends it.
Workers, pids, psutil, the control socket and gpu.jsonl are real; the GPU watcher also runs as a
user (uid 65534), whom the driver tells less."""
import json
import os
import shutil

from mpwatch.rundir.textfiles import read_jsonl
from mpwatch.tui.render import glyphs, gpu_rows, gpu_tables, segs
from tests.helpers import wait_for
from tests.supervisor.test_gpu_run import FAST, REPORTER, gpu_env, view

GiB = 1 << 30
ROOT = "needs root on this MIG GPU"
A100 = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100", "mem_total": 80 * GiB, "mig": [
    {"uuid": "MIG-aaaa", "gi": 1, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB},
    {"uuid": "MIG-bbbb", "gi": 2, "ci": 0, "profile": "3g.40gb", "mem_total": 40 * GiB}]}


def slices(first: list, second: list, **gpu) -> dict:
    return {"gpus": [A100], "frames": [{"gpus": [{"temperature": 55, "slices": [
        {"processes": first}, {"processes": second}], **gpu}]}]}


def test_ranks_contend_on_a_shared_slice_and_not_across_slices(headless, tmp_path, libnvml):
    """Ranks 0 and 1 on slice GI 1 (contention there), rank 2 alone on slice GI 2 of the same GPU
    (no contention: a slice is a GPU of its own)."""
    env = gpu_env(libnvml, tmp_path, slices(
        [{"pid": "rank:0", "mem": 12 * GiB}, {"pid": "rank:1", "mem": 11 * GiB}], [{"pid": "rank:2", "mem": 9 * GiB}],
        sm_clock=900, sm_clock_max=1410, throttle=["hw_thermal_slowdown", "idle"]),
        cuda={"0": [view("MIG-aaaa", 10 * GiB, 11 * GiB)], "1": [view("MIG-aaaa", 9 * GiB, 10 * GiB)],
              "2": [view("MIG-bbbb", 8 * GiB, 8 * GiB)]})
    run = headless(REPORTER, "100000", n=3, opts=FAST, env=env)

    def ready():
        st = run.status()
        ws = [w["gpu"] for w in st["workers"]]
        placed = len(ws) == 3 and all(w and w["mapped_by"] == "uuid" and w["mem_bytes"] for w in ws)
        kinds = [a["kind"] for s in (st["gpus"] or [{}])[0].get("slices", []) for a in s["alerts"]]
        return st if placed and "contention" in kinds else None
    st = wait_for(ready, timeout=90, what="every rank on its slice, and the contention on GI 1")
    (g,) = st["gpus"]
    a, b = g["slices"]
    (c,) = [x for x in a["alerts"] if x["kind"] == "contention"]
    assert (c["ranks"], c["gi"], c["severity"]) == ([0, 1], 1, "warning")  # 3 ranks, 2 slices: forced
    assert not [x for x in b["alerts"] + g["alerts"] if x["kind"] == "contention"]
    assert (a["mem_used"], a["mem_total"], a["ranks"], b["mem_used"], b["ranks"]) == (23 * GiB, 40 * GiB, [0, 1],
                                                                                    9 * GiB, [2])
    ws = {w["rank"]: w["gpu"] for w in st["workers"]}
    assert [(ws[r]["mig"]["gi"], ws[r]["shared_with"]) for r in range(3)] == [(1, [1]), (1, [0]), (2, [])]
    assert (g["sm_clock_mhz"], g["sm_clock_max_mhz"], g["throttle_reasons"]) == (900, 1410,
                                                                               ["idle", "hw_thermal_slowdown"])
    assert g["util_gpu"] is None and a["util_gpu"] is None and g["errors"]["utilization"] == "n/a on MIG"

    first = a["processes_ts"]
    wait_for(lambda: run.status()["gpus"][0]["slices"][0]["processes_ts"] > first + 1.0, 60,
             what="more process queries")
    events = [e for e in run.events("gpu_alert") if e["kind"] == "contention"]
    assert [(e["gpu"], e["gi"], e["ci"], e["ranks"]) for e in events] == [(0, 1, 0, [0, 1])]  # said once
    text = run.ctl("status").stdout
    assert "  MIG 3g.40gb (GI 1): mem 23.0G/40.0G (57%) · ranks 0-1 · MIG-aaaa" in text
    assert "  MIG 3g.40gb (GI 2): mem 9.0G/40.0G (22%) · rank 2 · MIG-bbbb" in text
    assert text.count("n/a on MIG") == 1 and "held: hw thermal slowdown" in text
    ticks = [x for x in read_jsonl(run.run_dir / "gpu.jsonl") if "gpus" in x]
    assert [(x["index"], x.get("gi")) for x in ticks[-1]["gpus"]] == [(0, None), (0, 1), (0, 2)]


WATCH_AS_USER = """
import json, os, sys, time
from pathlib import Path
from mpwatch.settings import Settings
from mpwatch.supervisor.gpu.ranks import RankInfo
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.testing.libnvml import SCRIPT_ENV
from mpwatch.testing.libnvml.script import write_script

data, views = json.loads(sys.argv[1]), json.loads(sys.argv[2])
me, ranks = os.getpid(), []
for _ in views:  # the ranks: forked (a user's process here cannot exec this interpreter again)
    pid = os.fork()
    if pid == 0:
        os.close(1)  # never holds the test's pipe open
        while os.getppid() == me:  # gone with this process, whatever ends it
            time.sleep(0.1)
        os._exit(0)
    ranks.append(pid)
watch = None
try:
    text = json.dumps(data)
    for r, pid in enumerate(ranks):
        text = text.replace(f'"rank:{r}"', str(pid))
    os.environ[SCRIPT_ENV] = str(write_script(json.loads(text), Path(os.environ["HOME"]) / "script.txt"))
    events = []
    watch = GpuWatch(0.1, lambda: [RankInfo(r, pid, True, True, [], views[r]) for r, pid in enumerate(ranks)],
                     lambda rank, **f: events.append(f), settings=Settings(), env={})
    assert watch.open(), watch.status
    for _ in range(6):
        watch.tick()
    part = watch.snapshot()
    print(json.dumps({**part, "ranks": ranks, "events": events,
                      "workers": [watch.worker_gpu(r) for r in range(len(ranks))]}))
finally:
    if watch is not None:
        watch.close()
    for pid in ranks:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
"""


def test_a_users_run_on_a_mig_gpu_says_what_it_cannot_see(nobody, libnvml):
    """The supervisor's GPU watcher as uid 65534 (its ranks real processes of that user): NVML
    refuses it the GPU's own memory and process list, and the memory of root's process on slice
    GI 2. The status says so, once, in plain words; each slice's memory and processes are there,
    each rank is on its slice, and nothing is called an outsider's memory for what is unknown."""
    shared = nobody.shared("mig")
    lib = shared / "lib"
    shutil.copytree(libnvml, lib)
    data = slices([{"pid": "rank:0", "mem": 5 * GiB}], [{"pid": "rank:1", "mem": 6 * GiB}, {"pid": "parent", "mem": 2 * GiB}])
    views = [view("MIG-aaaa", 4 * GiB, 4 * GiB), view("MIG-bbbb", 5 * GiB, 5 * GiB)]
    res = nobody.python("-c", WATCH_AS_USER, json.dumps(data), json.dumps(views), timeout=120,
                        env={"LD_LIBRARY_PATH": str(lib)})
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    out = json.loads(res.stdout)
    (g,) = out["gpus"]
    assert g["mem_used"] is None and g["errors"]["memory"] == g["errors"]["processes"] == ROOT
    a, b = g["slices"]
    assert (a["mem_used"], a["ranks"], b["mem_used"], b["ranks"]) == (5 * GiB, [0], 8 * GiB, [1])
    roots = next(p for p in b["processes"] if p["rank"] is None)
    assert roots["pid"] == os.getpid() and roots["mem_bytes"] is None  # root's: not a user's to see
    assert b["errors"]["process_memory"] == f"{ROOT} for another user's process"
    assert b["breakdown"]["outside"] is None and not [x for x in b["alerts"] if x["kind"] == "outside"]
    assert not [x for s in g["slices"] for x in s["alerts"] if x["kind"] == "contention"] and not out["events"]
    assert [(w["mig"]["gi"], w["mapped_by"], w["mem_bytes"]) for w in out["workers"]] == [(1, "uuid", 5 * GiB),
                                                                                        (2, "uuid", 6 * GiB)]
    # What a user reads: each refusal once, in plain words (the GPU screen's lines, the panel's row).
    notes = [segs.plain(line) for v in (g, a, b) for line in gpu_tables.gpu_notes(v)]
    assert notes.count(f"  memory and process list: {ROOT}") == 1
    assert sum("n/a on MIG" in n for n in notes) == 1
    assert notes.count(f"  process memory: {ROOT} for another user's process") == 1
    row = segs.plain(gpu_rows.gpu_row(g, glyphs.ASCII, 80))
    assert "needs root" in row and " MIG" in row and "Unknown Error" not in "".join(notes)
