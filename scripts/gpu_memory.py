"""scripts/gpu-check's memory check (issue 33): a snapshot of a real rank (ctl memory 0), then an
OOM forced on a real GPU, and its finding.

    python scripts/gpu_memory.py [--hold-mib N] [--timeout SECONDS]

Runs `mpwatch --headless -n 2 --cuda-memory-history tests/fixtures/cuda_oom.py GO` on the
first GPU torch sees, both ranks on it (the contention demo's mistake): rank 1 holds --hold-mib
MiB, rank 0 256 MiB, and rank 0, once GO exists, allocates 1 GiB at a time until CUDA runs out
(past what is free) and dies of it; before that, `mpwatch ctl memory 0` asks rank 0 for a snapshot.
Then checks:
  0. the snapshot asked: written into rank-0/memory/, 0600, a pickle with segments whose blocks
     carry the stacks that allocated them, that torch's own reader takes;
  1. one OOM finding for rank 0 (a gpu_alert `oom`, completed at its death: `update`), on that GPU,
     naming rank 1 as a holder, with what it asked for (1 GiB) and more than was free;
  2. the rank's allocator at the OOM (allocated, reserved) as torch's observer read it, and no
     expandable_segments hint (1 GiB segments, none freed: nothing is fragmented here);
  3. the snapshot written at the OOM: in rank-0/memory/, 0600, a pickle with segments whose
     blocks carry the stacks that allocated them (cuda_oom.py's line) and the OOM in its trace,
     that torch's own reader (torch.cuda._memory_viz.segsum) takes;
  4. rank 0's row says it (workers[].memory), and `summary` has the same one finding.
Exit 0 pass, 1 fail, 2 this machine cannot run it. The checks (`oom_checks`, `snapshot_checks`) are
functions of the run directory, which tests/e2e/test_gpu_memory_check.py also runs on a run of the
stand-in libnvidia-ml.so.1 and the scripted torch.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "cuda_oom.py"
CHUNK_MIB = 1024
GiB = 1 << 30


def say(msg: str) -> None:
    print(f"gpu-check (memory): {msg}", flush=True)


def events(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    path = run_dir / "events.jsonl"
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def snapshot_checks(path: str, fixture: str = str(FIXTURE), oom: bool = True) -> list[str]:
    """A snapshot (written at the OOM, with `oom`): a file of this user's alone, in memory_viz's
    format, with the stacks that allocated its blocks (and the OOM in its trace)."""
    p = Path(path)
    if not p.is_file() or stat.S_IMODE(p.stat().st_mode) != 0o600:
        return [f"snapshot {path}: not a 0600 file"]
    with open(p, "rb") as f:
        snap = pickle.load(f)  # this run's own file, just written by its rank
    blocks = [b for s in snap.get("segments", []) for b in s.get("blocks", [])]
    failures = []
    if not blocks:
        failures.append(f"snapshot {path}: no segment with blocks")
    if not any(fr.get("filename") == fixture for b in blocks for fr in b.get("frames", [])):
        failures.append(f"snapshot {path}: no block allocated from {fixture} (the history's stacks)")
    if oom and not any(e.get("action") == "oom" for t in snap.get("device_traces", []) for e in t):
        failures.append(f"snapshot {path}: no oom in its trace")
    try:
        from torch.cuda import _memory_viz

        _memory_viz.segsum(snap)  # torch's own reader: it checks that every segment adds up
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - any refusal of torch's reader is the failure
        failures.append(f"snapshot {path}: torch's _memory_viz.segsum refuses it: {exc}")
    return failures


def asked_checks(run_dir: Path) -> list[str]:
    """The snapshot `ctl memory 0` asked for."""
    written = [e for e in events(run_dir) if e.get("event") == "memory_written" and e.get("rank") == 0]
    if not written:
        why = [e.get("why") for e in events(run_dir) if e.get("event") == "memory_failed"]
        return [f"ctl memory 0 wrote no snapshot: {why}"]
    path = run_dir / written[0]["path"]
    w = written[0]
    say(f"ctl memory 0: {path} ({w.get('bytes')} bytes, the loop held {w.get('held_ms')} ms)")
    if path.parent != run_dir / "rank-0" / "memory":
        return [f"ctl memory 0 wrote {path}, not in rank-0/memory/"]
    return snapshot_checks(str(path), oom=False)


def oom_checks(run_dir: Path, status: dict[str, Any], chunk: int = CHUNK_MIB << 20) -> list[str]:
    """Rank 0's OOM finding, its row and its snapshot, from the run's files and its status."""
    found = [e for e in events(run_dir) if e.get("event") == "gpu_alert" and e.get("kind") == "oom"]
    if [bool(e.get("update")) for e in found] != [False, True]:
        return [f"not one OOM finding completed at its death: {[e.get('message') for e in found]}"]
    a = found[-1]
    d, m, failures = a.get("oom") or {}, a.get("message", ""), []
    say(f"the finding: {m}")
    say(f"its hint: {a.get('hint')}")
    if a.get("rank") != 0 or not d.get("died"):
        failures.append(f"the finding is rank {a.get('rank')}'s, died {d.get('died')}")
    if "rank 1 held" not in m:
        failures.append("the finding does not name rank 1 as a holder of the GPU's memory")
    if d.get("tried") != chunk or d.get("free") is None or d["free"] >= chunk:
        failures.append(f"asked {d.get('tried')} (want {chunk}) with {d.get('free')} free (want less)")
    if not d.get("allocated") or not d.get("reserved") or d["allocated"] > d["reserved"]:
        failures.append(f"the allocator at the OOM: {d.get('allocated')} allocated, "
                        f"{d.get('reserved')} reserved")
    if "expandable" in (a.get("hint") or "") or d.get("story") == "fragmentation":
        failures.append("fragmentation said where the memory was taken (1 GiB segments, none freed)")
    snap = d.get("snapshot")
    if not snap or not str(snap).startswith(str(run_dir / "rank-0" / "memory" / "oom-")):
        failures.append(f"no snapshot at the OOM in rank-0/memory/ ({snap})")
    else:
        failures += snapshot_checks(snap)
    w0 = next((w for w in status.get("workers", []) if w.get("rank") == 0), {})
    if (w0.get("memory") or {}).get("oom") != d.get("note"):
        failures.append(f"rank 0's row says {w0.get('memory')}, not the finding's note {d.get('note')!r}")
    res = subprocess.run([sys.executable, "-m", "mpwatch", "summary", str(run_dir), "--json"],
                         capture_output=True, text=True, timeout=60)
    said = [x["message"] for x in json.loads(res.stdout or "{}").get("alerts", []) if x.get("kind") == "oom"]
    if said != [m]:
        failures.append(f"summary's OOM findings: {said}")
    return failures


def run(timeout: float, hold_mib: int, env: dict[str, str]) -> tuple[Path, dict[str, Any] | None, str | None]:
    """The OOM run, stopped once its finding is complete: (its run directory, its last status, why
    it did not get there)."""
    tmp = Path(tempfile.mkdtemp(prefix="mpwatch-gpu-memory-"))
    run_dir, go = tmp / "run", tmp / "go"
    env = dict(env, OOM_RANKS="0", HOLD_MB=f"256,{hold_mib}", CHUNK_MB=str(CHUNK_MIB), SLEEP="0.1")
    cmd = [sys.executable, "-m", "mpwatch", "--headless", "-n", "2", "--run-dir", str(run_dir),
           "--gpu-interval", "0.5", "--cuda-memory-history", str(FIXTURE), str(go)]
    say("starting: " + " ".join(cmd))
    with open(tmp / "mpwatch.err", "wb") as err:
        sup = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env, cwd=tmp,
                               start_new_session=True)
    deadline, status, why = time.monotonic() + timeout, None, None

    def ask() -> dict[str, Any] | None:
        res = subprocess.run([sys.executable, "-m", "mpwatch", "ctl", "--run", str(run_dir), "status",
                              "--json"], capture_output=True, text=True, env=env, timeout=60)
        return json.loads(res.stdout) if res.returncode == 0 else None

    def ctl(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "mpwatch", "ctl", "--run", str(run_dir), *args],
                       capture_output=True, env=env, timeout=60)

    asked = False
    try:
        while time.monotonic() < deadline and sup.poll() is None:
            status = ask() if (run_dir / "control.json").exists() else None
            ws = (status or {}).get("workers", [])
            listed = {p.get("rank") for g in (status or {}).get("gpus", []) for v in (g, *g.get("slices", []))
                      for p in v.get("processes", [])}  # the GPU's process list names both ranks
            ready = len(ws) == 2 and all(w.get("gpu") and w.get("step") for w in ws) and listed >= {0, 1}
            if ready and not asked:
                asked = True
                ctl("memory", "0")  # a snapshot of a real rank, asked
            snapped = any(e.get("event") in ("memory_written", "memory_failed") for e in events(run_dir))
            if ready and snapped and not go.exists():
                go.write_text("")  # both ranks on the GPU, reporting, the snapshot in: rank 0 runs it out now
            if any(e.get("kind") == "oom" and e.get("update") for e in events(run_dir)):
                status = ask()
                break
            time.sleep(0.5)
        else:
            why = "the run ended" if sup.poll() is not None else f"no OOM finding within {timeout:g} s"
    finally:
        if sup.poll() is None:
            subprocess.run([sys.executable, "-m", "mpwatch", "ctl", "--run", str(run_dir), "stop"],
                           capture_output=True, env=env, timeout=60)
            try:
                sup.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(sup.pid, signal.SIGKILL)
                sup.wait()
    return run_dir, status, why


def check(timeout: float, hold_mib: int) -> int:
    try:
        import torch
    except ImportError:
        say("cannot run here: no torch")
        return 2
    if torch.version.cuda is None or not torch.cuda.is_available():
        say("cannot run here: no CUDA device for torch")
        return 2
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    run_dir, status, why = run(timeout, hold_mib, env)
    failures = [why] if why else asked_checks(run_dir) + oom_checks(run_dir, status or {})
    if failures:
        say("FAILED:\n  - " + "\n  - ".join(failures) + f"\n  run directory kept: {run_dir}")
        return 1
    say(f"OK: an OOM forced on a real GPU is one finding naming rank 1, with the allocator at the OOM and a "
        f"snapshot torch's reader takes ({run_dir})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu_memory.py")
    p.add_argument("--hold-mib", type=int, default=4096,
                   help="rank 1 holds this much on the GPU (default 4096)")
    p.add_argument("--timeout", type=float, default=180.0)
    ns = p.parse_args()
    return check(ns.timeout, ns.hold_mib)


if __name__ == "__main__":
    sys.exit(main())
