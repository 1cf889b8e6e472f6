"""scripts/gpu-check's MIG check, where a GPU is in MIG mode (issue 33); skipped elsewhere.

Finds the MIG devices NVML lists (it never changes the MIG layout), then runs
`mpwatch --headless -n 2 scripts/gpu_alloc.py` twice:
  1. two slices: CUDA_VISIBLE_DEVICES=MIG-a,MIG-b with --virtual-local-rank, so rank 0 runs on
     slice a and rank 1 on slice b (needs two MIG devices): each rank is placed on its own slice
     by its MIG UUID, each slice's memory is its own (NVML's, from the slice's handle) and holds
     its rank's allocation, its utilization is "n/a on MIG" (never 0), and there is NO contention;
  2. one slice: both ranks on MIG-a: the contention alert fires, on that slice (gi/ci), not on
     its GPU.
Run as a user, the GPU's own memory and process list are refused by the driver: the status must
say so in plain words ("needs root on this MIG GPU"), never "Unknown Error"; as root they are read.

    python scripts/gpu_mig.py [--mib N] [--timeout SECONDS]

Exit 0 when all hold or no GPU is in MIG mode here (said), 1 when a check fails, 2 when this
machine cannot run it. The checks (`two_slices`, `one_slice`) are pure functions of the status,
which tests/e2e/test_gpu_mig_check.py also runs on a status from the stand-in library.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROOT_ON_MIG = "needs root on this MIG GPU"
Status = dict[str, Any]


def say(msg: str) -> None:
    print(f"gpu-check (MIG): {msg}", flush=True)


def mig_devices() -> list[dict[str, Any]]:
    """Every MIG device of every GPU in MIG mode: its GPU's index, its UUID, GPU and compute instance."""
    import pynvml

    out = []
    pynvml.nvmlInit()
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                if pynvml.nvmlDeviceGetMigMode(h)[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
                    continue
                n = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
            except pynvml.NVMLError:
                continue
            for k in range(n):
                try:
                    m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                except pynvml.NVMLError:
                    continue
                uuid = pynvml.nvmlDeviceGetUUID(m)
                out.append({"gpu": i, "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                            "gi": pynvml.nvmlDeviceGetGpuInstanceId(m),
                            "ci": pynvml.nvmlDeviceGetComputeInstanceId(m),
                            "total": pynvml.nvmlDeviceGetMemoryInfo(m).total})
    finally:
        pynvml.nvmlShutdown()
    return out


def _slice(st: Status, mig: dict[str, Any]) -> dict[str, Any] | None:
    g = next((g for g in st["gpus"] if g["index"] == mig["gpu"]), None)
    return next((s for s in (g or {}).get("slices", [])
                 if (s["mig"]["gi"], s["mig"]["ci"]) == (mig["gi"], mig["ci"])), None)


def refusals(st: Status) -> list[str]:
    """What a MIG GPU's views say of the driver's refusals: plain words, never NVML's code names."""
    out = []
    for g in st["gpus"]:
        for v in (g, *g.get("slices", [])):
            for what, why in v["errors"].items():
                if "Unknown Error" in why or "Insufficient Permissions" in why:
                    out.append(f"GPU {v['index']} {what}: NVML's words, not plain ones: {why}")
        if "slices" in g and g["mem_used"] is None and g["errors"].get("memory") != ROOT_ON_MIG:
            out.append(f"GPU {g['index']}: memory N/A, and not said why ({g['errors'].get('memory')})")
    return out


def two_slices(st: Status, migs: list[dict[str, Any]]) -> list[str]:
    """Rank r on migs[r]: placed there by its MIG UUID, its allocation in that slice's memory, no
    contention, utilization n/a (never 0). Failures, one line each ([]: it holds)."""
    fails = refusals(st)
    ws = {w["rank"]: w for w in st["workers"]}
    for r, mig in enumerate(migs):
        wg = (ws.get(r) or {}).get("gpu") or {}
        got = (wg.get("index"), (wg.get("mig") or {}).get("gi"), wg.get("uuid"), wg.get("mapped_by"))
        if got != (mig["gpu"], mig["gi"], mig["uuid"], "uuid"):
            fails.append(f"rank {r}: on {got}, not on GPU {mig['gpu']} slice GI {mig['gi']} "
                         f"{mig['uuid']} by UUID")
        s = _slice(st, mig)
        if s is None:
            fails.append(f"no view of GPU {mig['gpu']} slice GI {mig['gi']}")
            continue
        reserved = ws[r]["metrics"].get("torch_reserved", 0) if r in ws else 0
        if s["mem_total"] != mig["total"] or s["mem_used"] is None or s["mem_used"] < reserved:
            fails.append(f"slice GI {mig['gi']}: memory {s['mem_used']}/{s['mem_total']}, NVML's total "
                         f"{mig['total']}, rank {r}'s torch reserved {reserved}")
        if s["util_gpu"] is not None or s["errors"].get("utilization") != "n/a on MIG":
            fails.append(f"slice GI {mig['gi']}: utilization {s['util_gpu']} "
                         f"({s['errors'].get('utilization')}), not 'n/a on MIG'")
        if s["ranks"] != [r]:
            fails.append(f"slice GI {mig['gi']}: ranks {s['ranks']}, not [{r}]")
    cont = [a["message"] for g in st["gpus"] for v in (g, *g.get("slices", [])) for a in v["alerts"]
            if a["kind"] == "contention"]
    fails += [f"contention across slices: {m}" for m in cont]
    return fails


def one_slice(st: Status, mig: dict[str, Any]) -> list[str]:
    """Both ranks on one slice: the contention alert stands on that slice, naming it."""
    fails = refusals(st)
    s = _slice(st, mig)
    alerts = [a for a in (s or {}).get("alerts", []) if a["kind"] == "contention"]
    where = (alerts[0].get("gi"), alerts[0].get("ci")) if alerts else None
    if not alerts or alerts[0].get("ranks") != [0, 1] or where != (mig["gi"], mig["ci"]):
        fails.append(f"no contention of ranks 0 and 1 on GPU {mig['gpu']} slice GI {mig['gi']}: "
                     f"{[a['message'] for a in alerts]}")
    return fails


class Run:
    """One `mpwatch --headless` run of gpu_alloc.py, stopped however the check ends."""

    def __init__(self, tmp: Path, env: dict[str, str], extra: list[str], mib: int):
        self.dir, self.go = tmp / "run", tmp / "go"
        self.env = env
        cmd = [sys.executable, "-m", "mpwatch", "--headless", "-n", "2", "--run-dir", str(self.dir),
               "--gpu-interval", "0.5", "--grace", "5", *extra, str(ROOT / "scripts" / "gpu_alloc.py"),
               str(self.go), str(mib)]
        say("starting: CUDA_VISIBLE_DEVICES=" + env["CUDA_VISIBLE_DEVICES"] + " " + " ".join(cmd))
        with open(tmp / "mpwatch.err", "wb") as log:  # the supervisor keeps its own descriptor
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=env, cwd=tmp, start_new_session=True)

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mpwatch", "ctl", "--run", str(self.dir), *args],
                              capture_output=True, text=True, env=self.env, timeout=60,
                              stdin=subprocess.DEVNULL)

    def allocated(self, deadline: float) -> Status:
        """The status once both ranks allocated and a process query is newer than that."""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the run ended (exit {self.proc.returncode})")
            res = self.ctl("status", "--json")
            st = json.loads(res.stdout) if res.returncode == 0 else None
            if st and len(st["workers"]) == 2 and all(w["step"] is not None for w in st["workers"]) \
                    and not self.go.exists():
                self.go.write_text("")  # both have CUDA up: allocate
            if st and all((w["step"] or 0) >= 1 and "t_alloc" in w["metrics"] for w in st["workers"]):
                t = max(w["metrics"]["t_alloc"] for w in st["workers"])
                ts = [s.get("processes_ts") or 0 for g in st["gpus"] for s in g.get("slices", [])]
                if ts and min(ts) > t + 0.2:
                    return st
            time.sleep(0.25)
        raise RuntimeError("timed out waiting for both allocations and a process query after them")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.ctl("stop")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def check(migs: list[dict[str, Any]], extra: list[str], mib: int, timeout: float,
          judge: Any) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="mpwatch-gpu-mig-"))
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES=",".join(m["uuid"] for m in migs))
    run = Run(tmp, env, extra, mib)
    try:
        st = run.allocated(time.monotonic() + timeout)
        print(run.ctl("status").stdout, flush=True)
        fails: list[str] = judge(st)
    except Exception as exc:  # noqa: BLE001 - reported, then the run is stopped
        fails = [f"{type(exc).__name__}: {exc}"]
    finally:
        run.stop()
    if fails:
        say(f"run directory kept: {run.dir}")
    return fails


def main() -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu_mig.py")
    p.add_argument("--mib", type=int, default=512, help="rank r allocates (r+1)*MIB MiB (default 512)")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds for each run (default 150)")
    ns = p.parse_args()
    try:
        import pynvml  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        say(f"cannot run here: {exc}")
        return 2
    try:
        migs = mig_devices()
    except Exception as exc:  # noqa: BLE001 - no driver: the NVML check has said so
        say(f"cannot run here: NVML: {exc}")
        return 2
    if not migs:
        say("no GPU in MIG mode here: the MIG check is skipped (it needs a MIG device: nvidia-smi mig -lgi)")
        return 0
    say(f"MIG devices: {json.dumps(migs)}; running as {'root' if os.geteuid() == 0 else 'a user'}")
    fails = []
    if len(migs) >= 2:
        pair = migs[:2]
        fails += check(pair, ["--virtual-local-rank"], ns.mib, ns.timeout, lambda st: two_slices(st, pair))
    else:
        say("one MIG device: the two-slice check needs two")
    fails += check(migs[:1], [], ns.mib, ns.timeout, lambda st: one_slice(st, migs[0]))
    if fails:
        say("FAILED:\n  - " + "\n  - ".join(fails))
        return 1
    say("OK: each rank on its own MIG slice (by UUID), each slice's own memory, n/a utilization, no "
        "contention across slices; contention on a shared slice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
