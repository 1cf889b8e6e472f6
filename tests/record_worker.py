"""The worker of the recorder's scenarios (tests/record.py) and of the TUI's end-to-end test:
it reports a loss that falls over three orders of magnitude, times its phases, and on the
ranks its environment names spawns a child, gets stuck, or fails.

Env (each a comma list of ranks): CHILD (a sleeping child process, as a DataLoader worker
would be), STALL (reports STALL_AT steps, then waits in wait_for_batch()), FAIL (raises a
CUDA-like error at FAIL_AT on every attempt), FAIL_ONCE (raises at FAIL_AT on its first
attempt only: a marker file in the working directory remembers it), EXIT (exits 0 at
EXIT_AT), LEAVE_CWD (at FAIL_AT removes the folder it was started in, the supervisor's too,
and exits 3: its restart cannot start). SLEEP: seconds a step.
"""
import math
import os
import subprocess
import sys
import threading
import time

import mpwatch

rank = int(os.environ.get("RANK", "0"))


def ranks(name: str) -> set[int]:
    return {int(x) for x in os.environ.get(name, "").split(",") if x.strip()}


sleep = float(os.environ.get("SLEEP", "0.05"))
stall_at = int(os.environ.get("STALL_AT", "40"))
fail_at = int(os.environ.get("FAIL_AT", "30"))
exit_at = int(os.environ.get("EXIT_AT", "20"))
marker = f"failed-once-rank-{rank}"


def wait_for_batch():
    threading.Event().wait()  # a data source that never delivers


def loss_at(step: int) -> float:
    return 3.0 * math.exp(-step / 25.0) + 0.002 * (1 + 0.1 * math.sin(step))


print(f"record worker rank {rank} starting", flush=True)
print(f"record worker rank {rank}: stderr is open", file=sys.stderr, flush=True)
child = None
if rank in ranks("CHILD"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
for step in range(10**9):
    if rank in ranks("STALL") and step == stall_at:
        wait_for_batch()
    if step == fail_at and (rank in ranks("FAIL") or (rank in ranks("FAIL_ONCE") and not os.path.exists(marker))):
        open(marker, "w").close()
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if step == fail_at and rank in ranks("LEAVE_CWD"):
        os.rmdir(os.getcwd())
        print("removed the folder the workers start in", file=sys.stderr, flush=True)
        sys.exit(3)
    if step == exit_at and rank in ranks("EXIT"):
        print(f"rank {rank} done at step {step}", flush=True)
        sys.exit(0)
    with mpwatch.phase("data"):
        time.sleep(sleep / 4)
    with mpwatch.phase("compute"):
        time.sleep(sleep * 3 / 4)
    mpwatch.report(step=step, loss=loss_at(step))
    if step % 20 == 0:
        print(f"rank {rank} step {step} loss {loss_at(step):.4f}", flush=True)
