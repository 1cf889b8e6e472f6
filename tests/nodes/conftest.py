"""Two nodes on one machine: two headless supervisors, one at 127.0.0.1 and one at
127.0.0.2 (--local-addr), meeting in torch's rendezvous on a free port, as two machines
would. Each is a tests.helpers.HeadlessRun of its own, cleaned up after the test."""
from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.helpers import HeadlessRun, mpwatch, wait_for

ADDRS = ("127.0.0.1", "127.0.0.2")


# A run's store or master port, below the kernel's ephemeral range (32768-60999 on Linux), where
# bind(0) and every outgoing connection (gloo's, a store client's) take theirs: a port bind(0) handed
# out was taken by another lane's connection before a supervisor slowed by torch's import bound it
# (EADDRINUSE, a fresh-clone suite, 2026-12-06). Each lane draws from a block of its own, in turn.
PORT_BASE = 20000
PORT_BLOCK = 1000
_drawn = [0]


def free_port() -> int:
    lane = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    start = PORT_BASE + PORT_BLOCK * ((int(lane) if lane.isdigit() else 0) % 12)
    for _ in range(PORT_BLOCK):
        port = start + (os.getpid() + _drawn[0]) % PORT_BLOCK
        _drawn[0] += 1
        try:
            with socket.socket() as s:  # free on every address (the store listens on all of them)
                s.bind(("", port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port in {start}-{start + PORT_BLOCK - 1}")


def node_flags(backend: str, node: int, port: int, nnodes: int = 2, rdzv_id: str = "job7") -> list[str]:
    """torchrun's flags for node `node` of a run on this machine."""
    flags = ["--nnodes", str(nnodes), "--local-addr", ADDRS[node]]
    if backend == "static":
        return flags + ["--node-rank", str(node), "--master-addr", ADDRS[0], "--master-port", str(port)]
    # c10d: node 0's supervisor hosts the rendezvous store (torch would guess it from the address)
    return flags + ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{ADDRS[0]}:{port}", "--rdzv-id", rdzv_id,
                    "--rdzv-conf", f"is_host={int(node == 0)}"]


def registered(run: HeadlessRun) -> bool:
    """The supervisor is in `mpwatch ls` (its run id is taken: the next one gets another)."""
    res = mpwatch("ls", "--json")
    return res.returncode == 0 and any(r["run_dir"] == str(run.run_dir.resolve()) for r in json.loads(res.stdout))


@pytest.fixture
def two_nodes(tmp_path):
    """Factory: two_nodes(script, *args, backend=..., n=(1, 1), opts=[...], node_opts=([...], [...]))
    -> [node0, node1], both started (node 0 first); `node_opts`: each node's own flags. Every
    process of both is gone after the test."""
    runs: list[HeadlessRun] = []

    def make(script, *args, backend="static", n=(1, 1), opts=(), node_opts=((), ()), env=None, port=None,
             nnodes=2):
        port = port or free_port()
        for node in (0, 1):
            flags = [*node_flags(backend, node, port, nnodes), *opts, *node_opts[node]]
            run = HeadlessRun(tmp_path / f"node{node}", script, *args, n=n[node], opts=flags, env=env)
            run.tmp.mkdir(parents=True, exist_ok=True)
            runs.append(run)
            run.start()
            wait_for(lambda run=run: registered(run) or run.proc.poll() is not None, 30,
                     what=f"node {node}'s supervisor to register")
        return runs[-2:]

    yield make
    for run in runs:
        run.cleanup()


def node_info(run: HeadlessRun) -> dict | None:
    """RunInfo.node once the first round has formed, else None."""
    node = run.status()["run"].get("node")
    return node if node and node["round"] >= 0 else None


def env_lines(run: HeadlessRun, rank: int) -> list[dict]:
    """The torchrun environment a worker printed (tests/fixtures/print_env.py), one per start."""
    return [json.loads(line[4:]) for line in run.log(rank).splitlines() if line.startswith("ENV ")]


def kill9(pid: int) -> None:
    os.kill(pid, 9)


def final(run: HeadlessRun) -> dict:
    return json.loads((run.run_dir / "final.json").read_text())


def explain(*runs: HeadlessRun) -> str:
    out = []
    for run in runs:
        out.append(f"=== {run.run_dir} ===\n{run.stderr_text[-3000:]}")
        for d in sorted(Path(run.run_dir).glob("rank-*")):
            out.append(f"--- {d.name} ---\n{(d / 'stderr.log').read_text(errors='replace')[-1500:]}")
    return "\n".join(out)


def run_cli(*args, env=None, cwd=None, timeout=60) -> subprocess.CompletedProcess:
    return mpwatch(*args, env=env, cwd=cwd, timeout=timeout)
