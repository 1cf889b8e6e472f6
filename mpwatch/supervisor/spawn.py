"""Start one worker: its environment (torchrun's contract plus ours), its own session and
process group, its log files, and the start-up hook that arms the parent-death signal
and the stack-dump handler (no preexec_fn: it is unsafe in a threaded supervisor)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mpwatch.contract import protocol
from mpwatch.rundir import layout
from mpwatch.supervisor.diagnose import flight
from mpwatch.supervisor.options import Options

INJECT_DIR = str(Path(__file__).resolve().parent.parent / "worker" / "boot")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Placement:
    """Where a worker stands in the run's world: what torchrun's elastic agent tells it.
    On one node its local and global ranks agree; on several, supervisor.nodes.cluster fills
    this from the rendezvous round (global ranks as torch's agent assigns them)."""

    local_rank: int
    rank: int  # global
    world: int  # every node's workers
    local_world: int
    master_addr: str
    master_port: int
    run_id: str  # TORCHELASTIC_RUN_ID: the rendezvous id
    restarts: int  # TORCHELASTIC_RESTART_COUNT
    max_restarts: int
    group_rank: int = 0  # the node's rank
    group_world: int = 1  # nodes
    role: str = "default"
    agent_store: bool | None = None  # the supervisor's rendezvous store serves the workers' too

    def torchrun_env(self) -> dict[str, str]:
        env = {
            "RANK": str(self.rank), "LOCAL_RANK": str(self.local_rank), "GROUP_RANK": str(self.group_rank),
            "ROLE_RANK": str(self.rank), "ROLE_NAME": self.role,  # one role: role ranks are global ranks
            "WORLD_SIZE": str(self.world), "LOCAL_WORLD_SIZE": str(self.local_world),
            "GROUP_WORLD_SIZE": str(self.group_world), "ROLE_WORLD_SIZE": str(self.world),
            "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_RUN_ID": self.run_id, "TORCHELASTIC_RESTART_COUNT": str(self.restarts),
            "TORCHELASTIC_MAX_RESTARTS": str(self.max_restarts),
        }
        if self.agent_store is not None:
            env["TORCHELASTIC_USE_AGENT_STORE"] = str(self.agent_store)
        return env


def one_node(o: Options, rank: int, world: int, master_port: int, run_id: str, restarts: int) -> Placement:
    """A worker of a run on one node: its local rank is its global rank."""
    return Placement(local_rank=rank, rank=rank, world=world, local_world=world, master_addr=o.master_addr,
                     master_port=master_port, run_id=o.rdzv_id or run_id, restarts=restarts,
                     max_restarts=o.max_restarts, role=o.role)


OMP_THREADS = "OMP_NUM_THREADS"


def openmp(base: Mapping[str, str], nprocs: int) -> tuple[dict[str, str], str | None]:
    """torchrun's default for OpenMP, added to every worker's environment (and the forkserver's):
    where more than one worker shares the node and OMP_NUM_THREADS is unset, each worker's is 1, as
    torchrun sets it. Each would otherwise start a thread per core (N workers, N threads a core)
    that spin between parallel regions (3 ranks of demo/hang.py on 2 cores took 2.8x the CPU and
    1.7x the time: bench/bench_openmp.py). Decided at the start, by -n (a resize keeps it).
    Returns what to add and the line that says so (nothing, None: the user's own value, or one
    worker)."""
    if nprocs <= 1 or OMP_THREADS in base:
        return {}, None
    return {OMP_THREADS: "1"}, (f"{OMP_THREADS}=1 for each worker, as torchrun sets it where several "
                                f"share a node (set {OMP_THREADS} to choose)")


def visible_device(base: Mapping[str, str], local_rank: int) -> str:
    """torchrun's --virtual-local-rank: the one GPU a worker sees, through the parent's
    CUDA_VISIBLE_DEVICES when it has one."""
    parent = base.get("CUDA_VISIBLE_DEVICES")
    if parent is None:
        return str(local_rank)
    ids = [x.strip() for x in parent.split(",") if x.strip()]
    return ids[local_rank] if local_rank < len(ids) else ""


def worker_env(base: Mapping[str, str], place: Placement, *, channel: str, authkey: bytes, run_id: str,
               rank_dir: Path, stack_file: Path, flush_s: float, virtual_local_rank: bool = False,
               nccl_flight: bool = False, auto: bool = True, cuda_history: int = 0) -> dict[str, str]:
    """torchrun's variables, ours, and the NCCL flight recorder's when it is switched on
    (settings.Settings.nccl_flight). `auto`: the workers put in automatic steps (mpwatch.worker.auto).
    The CUDA memory forensics (mpwatch.worker.cuda_memory) are armed in every worker; with
    `cuda_history` (--cuda-memory-history) each keeps that many allocations' stacks; its snapshots
    go to rank_dir's memory folder. MPWATCH_RANK is the supervisor's own key for the worker: its
    local rank."""
    env = dict(base)
    env.update(place.torchrun_env())
    # As torchrun's agent sets it (1: abort on a collective error); with the flight recorder on,
    # 3 (skip the clean-up that aborts before its dump is written: pytorch#121055, as torchtitan does).
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", flight.async_error_handling(nccl_flight))
    if virtual_local_rank:
        env["LOCAL_RANK"] = "0"
        env["CUDA_VISIBLE_DEVICES"] = visible_device(base, place.local_rank)
    env.update({
        protocol.ENV_ADDRESS: channel,
        protocol.ENV_AUTHKEY: authkey.hex(),
        protocol.ENV_RANK: str(place.local_rank),
        protocol.ENV_RUN: run_id,
        protocol.ENV_STACK_FILE: str(stack_file),
        protocol.ENV_SUPERVISOR_PID: str(os.getpid()),
        protocol.ENV_FLUSH: str(flush_s),
        protocol.ENV_AUTO: "1" if auto else "0",
        protocol.ENV_CUDA_OOM: "1",
        protocol.ENV_MEMORY_DIR: str(rank_dir / layout.MEMORY),
    })
    if cuda_history > 0:
        env[protocol.ENV_CUDA_HISTORY] = str(cuda_history)
    else:
        env.pop(protocol.ENV_CUDA_HISTORY, None)  # a supervisor's own environment never switches it on
    # Unbuffered so a crash's last words reach the log file; the user may override.
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Only the start-up hook's own directory: the workers run our interpreter, where mpwatch
    # is installed, and a repository root here could shadow the user's packages.
    paths = [INJECT_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return flight.apply(env, rank_dir) if nccl_flight else env


# A worker's own variables (worker_env): the forkserver has none of them; each child is given its own.
PER_WORKER = (protocol.ENV_ADDRESS, protocol.ENV_AUTHKEY, protocol.ENV_RANK, protocol.ENV_STACK_FILE,
              protocol.ENV_FLUSH, protocol.ENV_AUTO, protocol.ENV_CUDA_OOM, protocol.ENV_CUDA_HISTORY,
              protocol.ENV_MEMORY_DIR, protocol.ENV_HOOK_ONLY, protocol.ENV_TUNABLES)


def forkserver_env(base: Mapping[str, str], run_id: str, nccl_flight: bool = False) -> dict[str, str]:
    """The run's forkserver's environment (supervisor.preload): what every worker's has in common
    (worker_env's, without any rank's variables, nor the hooks' switches: it must not put in
    the automatic steps for itself), and the run's marks (supervisor.workers.marks), which its
    children keep in /proc/PID/environ."""
    env = {k: v for k, v in base.items() if k not in PER_WORKER}
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", flight.async_error_handling(nccl_flight))
    env.update({protocol.ENV_RUN: run_id, protocol.ENV_SUPERVISOR_PID: str(os.getpid())})
    env.setdefault("PYTHONUNBUFFERED", "1")
    paths = [INJECT_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def start_worker(argv: list[str], env: Mapping[str, str], stdout: IO[bytes], stderr: IO[bytes],
                 cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Popen the worker in a new session; every byte of its output goes to the log files
    (rundir.writer.RunStore.open_log: the caller closes them once the worker has them)."""
    return subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
        start_new_session=True, close_fds=True,
    )


def command(launch: str, script: str, args: list[str]) -> list[str]:
    """A worker's command line: python SCRIPT, python -m MODULE, or the executable itself
    (torchrun's -m and --no-python)."""
    if launch == "module":
        return [sys.executable, "-m", script, *args]
    if launch == "exec":
        return [script, *args]
    return [sys.executable, script, *args]
