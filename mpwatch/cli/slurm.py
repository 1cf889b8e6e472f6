"""Slurm, read from the environment srun gives each task: which node this is, how many
there are, the job and step, and the node list in Slurm's bracketed form (parsed here:
no `scontrol` needed). Standard library only; runs on the CLI's main thread.

mpwatch runs as one task per node (`srun --ntasks-per-node=1 mpwatch ...`); anything else
is an error, never a silent fall back to a one-node run: every node would form its own
world and hang.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mpwatch.contract import numtext

# hosts (and tasks) a Slurm variable may spell: "node[0-99999999999]" is refused, never built
HOSTS_MAX = 1 << 16


class SlurmError(ValueError):
    """A Slurm step mpwatch cannot run in: the message says why and what to do."""


@dataclass(frozen=True)
class SlurmStep:
    job_id: str
    step_id: str | None
    node_rank: int  # SLURM_NODEID: this node's place in the step's node list
    nodes: tuple[str, ...]  # the step's nodes, expanded, in Slurm's order
    host: str  # this node's name

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def head(self) -> str:
        """The first node: the rendezvous host."""
        return self.nodes[0]

    @property
    def rdzv_id(self) -> str:
        return self.job_id if self.step_id is None else f"{self.job_id}.{self.step_id}"


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip():
            return value.strip()
    return None


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets: "a[1,3],b" -> ["a[1,3]", "b"]."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"unbalanced ']' in the node list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise SlurmError(f"unbalanced '[' in the node list {text!r}")
    parts.append("".join(cur))
    return parts


def _range(spec: str, text: str) -> list[str]:
    """One bracket's entries: "01-03,07" -> ["01", "02", "03", "07"] (the low bound's width kept)."""
    out: list[str] = []
    for part in spec.split(","):
        m = re.fullmatch(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", part.strip())
        if m is None:
            raise SlurmError(f"cannot read {part!r} in the node list {text!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise SlurmError(f"range {part!r} runs backwards in the node list {text!r}")
        if int(hi) - int(lo) + len(out) >= HOSTS_MAX:
            raise SlurmError(f"the node list {text[:80]!r} names more than {HOSTS_MAX} hosts")
        out.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
    return out


def expand_nodelist(text: str) -> list[str]:
    """Slurm's host list: "gpu[01-03,07],cpu5" -> gpu01 gpu02 gpu03 gpu07 cpu5; several
    brackets in one name multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2)."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        if not item:
            raise SlurmError(f"empty name in the node list {text!r}")
        names = [""]
        for literal, bracket in re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", item):
            names = [n + literal for n in names]
            if bracket:
                entries = _range(bracket, text)
                if len(names) * len(entries) + len(hosts) > HOSTS_MAX:
                    raise SlurmError(f"the node list {text[:80]!r} names more than {HOSTS_MAX} hosts")
                names = [n + e for n in names for e in entries]
        hosts.extend(names)
    return hosts


def _tasks_per_node(text: str) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE: "1(x3),2" -> [1, 1, 1, 2]."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"([0-9]{1,6})(?:\(x([0-9]{1,6})\))?", part.strip())
        if m is None:
            raise SlurmError(f"cannot read SLURM_STEP_TASKS_PER_NODE={text[:80]!r}")
        times = int(m.group(2) or 1)
        if times + len(out) > HOSTS_MAX:
            raise SlurmError(f"SLURM_STEP_TASKS_PER_NODE={text[:80]!r} names more than {HOSTS_MAX} nodes")
        out.extend([int(m.group(1))] * times)
    return out


def _int(env: Mapping[str, str], *names: str) -> int | None:
    value = _first(env, *names)
    if value is None:
        return None
    number = numtext.int_of(value.strip(), 9)  # ASCII digits: "²" is no number
    if number is None:
        raise SlurmError(f"{names[0]}={value[:80]!r} is not a number")
    return number


def detect(env: Mapping[str, str]) -> SlurmStep | None:
    """The Slurm step this process is a task of, or None outside one (no job, or the batch
    script itself, where only this one mpwatch runs). Raises SlurmError for a step mpwatch
    cannot run in: several tasks per node, or variables it cannot read."""
    job = _first(env, "SLURM_JOB_ID", "SLURM_JOBID")
    step = _first(env, "SLURM_STEP_ID", "SLURM_STEPID")
    if job is None or step is None:
        return None
    listed = _first(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if listed is None:
        raise SlurmError("inside a Slurm step without SLURM_STEP_NODELIST: cannot tell the nodes apart")
    nodes = expand_nodelist(listed)
    nnodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES") or len(nodes)
    if nnodes != len(nodes):
        raise SlurmError(f"SLURM_STEP_NUM_NODES={nnodes} but the node list {listed!r} names {len(nodes)}")
    ntasks = _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    per_node = _first(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    several = (ntasks is not None and ntasks != nnodes) or (
        per_node is not None and any(n != 1 for n in _tasks_per_node(per_node)))
    if several:
        what = f"{ntasks} tasks" if ntasks is not None else f"tasks per node {per_node}"
        raise SlurmError(f"this Slurm step runs {what} on {nnodes} node(s); mpwatch starts "
                         "the workers itself and needs one task per node (srun --ntasks-per-node=1)")
    node_rank = _int(env, "SLURM_NODEID")
    if node_rank is None:
        raise SlurmError("inside a Slurm step without SLURM_NODEID: cannot tell which node this is")
    if not 0 <= node_rank < nnodes:
        raise SlurmError(f"SLURM_NODEID={node_rank} is outside the step's {nnodes} node(s)")
    host = _first(env, "SLURMD_NODENAME") or nodes[node_rank]
    return SlurmStep(job_id=job, step_id=step, node_rank=node_rank, nodes=tuple(nodes), host=host)
