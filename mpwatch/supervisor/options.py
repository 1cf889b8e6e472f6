"""What a run was asked to do: the command line's options, as the supervisor takes them; and
the one bound on a run's workers (`worker_cap`), which -n/--nproc-per-node and `resize` share."""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Launch = Literal["python", "module", "exec"]  # python SCRIPT | python -m MODULE | the executable itself

# The most workers a run may have on one node, by -n or by `resize`: the larger of CAP_FLOOR and
# PER_CPU a CPU or a GPU of this machine (a worker per GPU is torchrun's norm, a few per core is as
# far as CPU-bound workers go, 64 lets a small box try a wide run), unless MPWATCH_MAX_WORKERS says.
# A typo (-n 100000 for 10) is refused at the command line instead of flooding the machine.
CAP_FLOOR = 64
PER_CPU = 4  # workers a CPU (or a GPU) of this machine may have
GPU_DEVICES = "/dev/nvidia[0-9]*"


def machine_cap() -> int:
    """The default bound: the larger of 64 and four a CPU or a GPU (counted by their device
    files: no NVML needed)."""
    return max(CAP_FLOOR, PER_CPU * (os.cpu_count() or 1), PER_CPU * len(glob.glob(GPU_DEVICES)))


def worker_cap(max_workers: int | None) -> int:
    """The bound on a run's workers: MPWATCH_MAX_WORKERS (settings.Settings.max_workers) when
    set, else machine_cap()."""
    return max_workers or machine_cap()


@dataclass
class NodesOptions:
    """A multi-node run: this node's side of torch's rendezvous (supervisor.nodes.rendezvous)."""

    backend: str  # static | c10d
    endpoint: str  # HOST:PORT of the rendezvous store
    rdzv_id: str  # the run's name in the rendezvous (torchrun's --rdzv-id, or Slurm's job)
    min_nodes: int
    max_nodes: int
    node_rank: int | None  # static: given; c10d: assigned by the rendezvous
    host: str  # how ssh reaches this node (--local-addr, Slurm's node name, the hostname)
    local_addr: str | None = None
    conf: dict[str, str] = field(default_factory=dict)  # --rdzv-conf
    slurm: str | None = None  # "job 123 step 0" when Slurm said where we run


@dataclass
class Options:
    script: str
    args: list[str]
    nprocs: int
    run_dir: Path | str | None = None
    max_restarts: int = 0
    stall_timeout: float = 60.0
    # no first report this long after a start: a slow start (said once, dumped once)
    startup_timeout: float = 600.0
    grace: float = 10.0
    resize_mode: str = "restart"  # restart | independent
    gpu_interval: float = 1.0
    # --stop-signal: a rank's process gets it first, its process group SIGKILL later
    stop_signal: str = "SIGTERM"
    metrics_port: int | None = None  # --metrics-port (or MPWATCH_METRICS_PORT): serve Prometheus text there
    metrics_addr: str = "127.0.0.1"  # --metrics-addr
    run_id: str | None = None  # given by a launcher that claimed the run (rundir.claim)
    made_run_dir: tuple[int, int] | None = None  # (dev, inode) of the run directory that launcher made
    cwd: str = field(default_factory=os.getcwd)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    # torchrun's side of the launch (cli.args)
    launch: Launch = "python"
    role: str = "default"  # ROLE_NAME
    master_addr: str = "127.0.0.1"  # one node: MASTER_ADDR of the workers
    master_port: int | None = None  # one node: MASTER_PORT (None: a free port)
    rdzv_id: str | None = None  # one node: TORCHELASTIC_RUN_ID (None: the run id)
    virtual_local_rank: bool = False  # LOCAL_RANK=0, each worker sees its own GPU as device 0
    auto: bool = True  # automatic steps in the workers (mpwatch.worker.auto); --no-auto
    cuda_history: bool = False  # --cuda-memory-history: each rank records its allocations' stacks
    # torch imported once (supervisor.preload): --preload MODULE (each), off with --no-preload
    preload: list[str] = field(default_factory=list)
    preload_on: bool = True
    nodes: NodesOptions | None = None  # several nodes
    # the flags above as typed, for a launcher that starts the supervisor in its own process
    supervisor_flags: list[str] = field(default_factory=list)
