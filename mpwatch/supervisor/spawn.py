"""Start one worker: its environment (torchrun's contract plus ours), its own session and
process group, its log files, and the start-up hook that arms the parent-death signal
and the stack-dump handler (no preexec_fn: it is unsafe in a threaded supervisor)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from mpwatch import protocol
from mpwatch.supervisor import flight

INJECT_DIR = str(Path(__file__).resolve().parent.parent / "_inject")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def worker_env(base: Mapping[str, str], *, rank: int, world: int, master_port: int, channel: str,
               authkey: bytes, run_id: str, rank_dir: Path, stack_file: Path, flush_s: float) -> dict[str, str]:
    """torchrun's variables, ours, and the NCCL flight recorder's when it is switched on."""
    env = dict(base)
    env.update({
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RUN_ID": run_id,
        protocol.ENV_ADDRESS: channel,
        protocol.ENV_AUTHKEY: authkey.hex(),
        protocol.ENV_RANK: str(rank),
        protocol.ENV_RUN: run_id,
        protocol.ENV_STACK_FILE: str(stack_file),
        protocol.ENV_SUPERVISOR_PID: str(os.getpid()),
        protocol.ENV_FLUSH: str(flush_s),
    })
    # Unbuffered so a crash's last words reach the log file; the user may override.
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Only the start-up hook's own directory: the workers run our interpreter, where mpwatch
    # is installed, and a repository root here could shadow the user's packages.
    paths = [INJECT_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return flight.apply(env, rank_dir) if flight.enabled(base) else env


def start_worker(argv: list[str], env: Mapping[str, str], stdout: Path, stderr: Path,
                 cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Popen the worker in a new session; every byte of its output goes to the log files."""
    with open(stdout, "ab") as out, open(stderr, "ab") as err:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True, close_fds=True,
        )


def python_argv(script: str, args: list[str]) -> list[str]:
    return [sys.executable, script, *args]
