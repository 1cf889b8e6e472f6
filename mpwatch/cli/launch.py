"""`mpwatch [options] SCRIPT [ARGS...]`: check the command line, turn torchrun's flags (and
Slurm's environment) into the run's Options, then run the supervisor here (headless) or
hand over to the TUI's launcher. Runs on the main thread; never imports torch.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mpwatch.cli import slurm
from mpwatch.cli.args import UsageError, die, no_effect, relayed_flags
from mpwatch.settings import Settings

if TYPE_CHECKING:
    from mpwatch.rundir.claim import Claim
    from mpwatch.supervisor.options import Launch, NodesOptions, Options

Launcher = Callable[[argparse.Namespace, "Options", Settings, "Claim"], int]

STATIC_PORT = 29500  # torchrun's --master-port default
C10D_PORT = 29400  # torch's c10d rendezvous backend's default port


def visible_gpu_count() -> int:
    """NVIDIA GPUs this process may use (CUDA_VISIBLE_DEVICES, else NVML); 0 without any."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([x for x in vis.split(",") if x.strip() and x.strip() != "-1"])
    from mpwatch.probes.nvml import library_loads

    if not library_loads():
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no library, a broken one: no GPU
        return 0


def default_nprocs() -> int:
    """Visible NVIDIA GPUs, or 2 without any."""
    return visible_gpu_count() or 2


def resolve_nprocs(value: int | str | None) -> int:
    """-n/--nproc-per-node: a number, or torchrun's words auto (GPUs, else CPUs), cpu, gpu."""
    if isinstance(value, int):
        return value
    if value is None:
        return default_nprocs()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if value == "cpu":
        return cpus
    gpus = visible_gpu_count()
    if value == "gpu" and not gpus:
        raise UsageError("--nproc-per-node gpu: no NVIDIA GPU is visible")
    return gpus or cpus


def check_script(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"script not found: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a script")
    if not os.access(path, os.R_OK):
        raise UsageError(f"script is not readable: {path}")


def launch_kind(ns: argparse.Namespace) -> Launch:
    """How the workers run SCRIPT (torchrun's -m, --no-python, --run-path), checked."""
    if ns.module and ns.no_python:
        raise UsageError("-m/--module and --no-python cannot be used together (as in torchrun)")
    if ns.run_path or not (ns.module or ns.no_python):  # --run-path: python runs the file, as without it
        check_script(ns.script)
        return "python"
    if ns.module:
        if not all(part.isidentifier() for part in ns.script.split(".")):
            raise UsageError(f"-m needs a module name such as pkg.train, got {ns.script!r}")
        return "module"
    found = shutil.which(ns.script)
    if found is None:
        what = "not executable" if os.path.exists(ns.script) else "not found"
        raise UsageError(f"--no-python: executable {what}: {ns.script}")
    return "exec"


def nodes_options(ns: argparse.Namespace, env: Mapping[str, str]) -> NodesOptions | None:
    """The multi-node side of the command line, Slurm filling in what the flags leave out;
    None for a run on one node."""
    from mpwatch.supervisor.options import NodesOptions

    try:
        step = slurm.detect(env)
    except slurm.SlurmError as exc:
        raise UsageError(f"Slurm: {exc}") from None
    if step is not None and step.nnodes == 1:
        step = None  # a one-node step: an ordinary run
    lo, hi = ns.nnodes or ((step.nnodes, step.nnodes) if step else (1, 1))
    if step is not None and hi != step.nnodes:
        raise UsageError(f"--nnodes {hi} but the Slurm step has {step.nnodes} nodes")
    if hi == 1:
        return None
    if ns.standalone:
        raise UsageError(f"--standalone is a one-node run; it cannot take --nnodes {hi}")
    backend = ns.rdzv_backend or "static"
    if backend not in ("static", "c10d"):
        raise UsageError(f"--rdzv-backend {backend}: mpwatch runs on torch's static and c10d rendezvous")
    head = step.head if step else None
    node_rank: int | None = None
    if backend == "static":
        node_rank = ns.node_rank if ns.node_rank is not None else (step.node_rank if step else 0)
        if node_rank >= hi:
            raise UsageError(f"--node-rank {node_rank} is outside --nnodes {hi} (ranks 0-{hi - 1})")
        endpoint = (ns.rdzv_endpoint
                    or f"{ns.master_addr or head or '127.0.0.1'}:{ns.master_port or STATIC_PORT}")
    else:
        endpoint = ns.rdzv_endpoint or (f"{head}:{ns.master_port or C10D_PORT}" if head else "")
        if not endpoint:
            raise UsageError(f"--rdzv-backend c10d on {hi} nodes needs --rdzv-endpoint HOST:PORT "
                             "(a node every node can reach)")
    return NodesOptions(
        backend=backend, endpoint=endpoint, rdzv_id=ns.rdzv_id or (step.rdzv_id if step else "none"),
        min_nodes=lo, max_nodes=hi, node_rank=node_rank,
        host=ns.local_addr or (step.host if step else socket.gethostname()), local_addr=ns.local_addr,
        conf=dict(ns.rdzv_conf or {}),
        slurm=None if step is None else f"job {step.job_id} step {step.step_id}, node {step.node_rank}")


def unused(ns: argparse.Namespace, nodes: NodesOptions | None) -> list[str]:
    """Flags given that do nothing here, each with why, for one line on stderr."""
    said = []
    flags = no_effect(ns)
    if flags:
        said.append(", ".join(flags) + " (mpwatch keeps each rank's whole output in its run directory)")
    if nodes is None:
        one = [f for f, v in (("--node-rank", ns.node_rank), ("--rdzv-backend", ns.rdzv_backend),
                              ("--rdzv-endpoint", ns.rdzv_endpoint), ("--rdzv-conf", ns.rdzv_conf),
                              ("--local-addr", ns.local_addr)) if v is not None]
        if one:
            said.append(", ".join(one) + " (one node: no rendezvous)")
    elif nodes.backend == "c10d":
        c10d = [f for f, v in (("--node-rank", ns.node_rank), ("--master-addr", ns.master_addr),
                               ("--master-port", ns.master_port if ns.rdzv_endpoint else None))
                if v is not None]
        if c10d:
            said.append(", ".join(c10d) + " (c10d: the rendezvous assigns node ranks at --rdzv-endpoint)")
    return said


def options(ns: argparse.Namespace, env: Mapping[str, str]) -> Options:
    from mpwatch.supervisor.options import Options

    launch = launch_kind(ns)
    nodes = nodes_options(ns, env)
    said = unused(ns, nodes)
    if said and not ns.supervise_only:
        print("mpwatch: accepted, no effect here: " + "; ".join(said), file=sys.stderr)
    return Options(
        script=ns.script, args=list(ns.args), nprocs=resolve_nprocs(ns.nprocs), run_dir=ns.run_dir,
        max_restarts=ns.max_restarts, stall_timeout=ns.stall_timeout, startup_timeout=ns.startup_timeout,
        grace=ns.shutdown_timeout if ns.shutdown_timeout is not None else ns.grace,
        resize_mode=ns.resize_mode, gpu_interval=ns.gpu_interval, run_id=ns.run_id, launch=launch,
        stop_signal=ns.stop_signal, metrics_port=ns.metrics_port, metrics_addr=ns.metrics_addr or "127.0.0.1",
        role=ns.role, master_addr=ns.master_addr or "127.0.0.1", master_port=ns.master_port,
        rdzv_id=ns.rdzv_id, virtual_local_rank=ns.virtual_local_rank, nodes=nodes, auto=not ns.no_auto,
        cuda_history=ns.cuda_memory_history, preload=list(ns.preload or []), preload_on=not ns.no_preload,
        supervisor_flags=relayed_flags(ns), made_run_dir=ns.made_run_dir)


def check_bound(nprocs: int, settings: Settings) -> None:
    """-n past the bound a run's workers share with `resize` (supervisor.options.worker_cap)."""
    from mpwatch.supervisor.options import worker_cap

    cap = worker_cap(settings.max_workers)
    if nprocs > cap:
        raise UsageError(f"-n {nprocs}: at most {cap} workers on this machine (MPWATCH_MAX_WORKERS "
                         "sets another bound)")


def cmd_run(ns: argparse.Namespace, settings: Settings) -> int:
    opts = options(ns, os.environ)
    check_bound(opts.nprocs, settings)
    if opts.metrics_port is None:
        opts.metrics_port = settings.metrics_port
    if ns.metrics_addr is not None and opts.metrics_port is None:
        raise UsageError("--metrics-addr goes with --metrics-port (or MPWATCH_METRICS_PORT)")
    from mpwatch.rundir import claim, registry

    if ns.run_dir is not None and os.path.exists(ns.run_dir) and not os.path.isdir(ns.run_dir):
        raise UsageError(f"--run-dir {ns.run_dir} exists and is not a directory")
    taken: Claim | None = None
    if opts.made_run_dir is None:
        # The run's id and directory are claimed here, before anything starts (rundir.claim);
        # torchrun's --log-dir is a folder of runs: the run's directory goes inside.
        folder = ns.log_dir if ns.run_dir is None else None
        try:
            taken = claim.claim(opts.script, opts.nprocs, opts.cwd, settings.tmpdir, ns.run_dir, opts.run_id,
                                folder)
        except registry.RunError as exc:
            return die(str(exc))
        opts.run_id, opts.run_dir = taken.run_id, str(taken.run_dir)
    if taken is not None and not ns.headless and not ns.supervise_only:
        tui = _tui_launcher()
        if tui is not None:
            return tui(ns, opts, settings, taken)
    return _supervise(opts, settings, taken)


def _supervise(opts: Options, settings: Settings, taken: Claim | None) -> int:
    """This process is the supervisor: the run is served here until it ends."""
    from mpwatch.rundir import registry
    from mpwatch.supervisor.core import Run
    from mpwatch.supervisor.headless import Reporter

    try:
        run = Run(opts, settings, status_out=Reporter(), taken=taken)
        run.setup()  # every RunError comes before it holds anything (the supervisor branch: it releases)
    except registry.RunError as exc:
        return die(str(exc))
    code: int = run.serve()
    return code


def _tui_launcher() -> Launcher | None:
    """The TUI's launcher when the TUI is installed, else None (headless then)."""
    try:
        from mpwatch.cli.tui_launch import launch_with_tui
    except ImportError:
        return None
    launch: Launcher = launch_with_tui
    return launch
