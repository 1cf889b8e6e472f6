"""Slurm: mpwatch under `srun --ntasks-per-node=1`, read from the variables srun really
sets (the test sets them, as srun would on each node): the node list in Slurm's bracketed
form, the node rank, the job and step; the cases it refuses, in one line and exit code 2;
and a real two-node run whose flags all come from Slurm's variables."""
from __future__ import annotations

import os
import re

import pytest

from mpwatch.cli import slurm
from mpwatch.cli.args import run_parser
from mpwatch.cli.launch import options
from tests.helpers import FIXTURES, HeadlessRun, mpwatch, need, one_line_error, wait_for
from tests.nodes.conftest import env_lines, explain, free_port, node_info, registered

SCRIPT = str(FIXTURES / "print_env.py")


def step_env(node: int, nodelist: str = "gpu[01-03,07],cpu5", nnodes: int = 5, **more: str) -> dict[str, str]:
    """What srun sets in a task of a one-task-per-node step (Slurm 23's names)."""
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
           "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist, "SLURM_STEP_NODELIST": nodelist,
           "SLURM_JOB_NUM_NODES": str(nnodes), "SLURM_NNODES": str(nnodes), "SLURM_STEP_NUM_NODES": str(nnodes),
           "SLURM_NTASKS": str(nnodes), "SLURM_STEP_NUM_TASKS": str(nnodes),
           "SLURM_STEP_TASKS_PER_NODE": f"1(x{nnodes})", "SLURM_TASKS_PER_NODE": f"1(x{nnodes})",
           "SLURM_NODEID": str(node), "SLURM_PROCID": str(node), "SLURM_LOCALID": "0"}
    env["SLURMD_NODENAME"] = slurm.expand_nodelist(nodelist)[node]
    env.update(more)
    return env


@pytest.mark.parametrize("text,hosts", [
    ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
    ("node7", ["node7"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("a[1,3],b-[2-3].x", ["a1", "a3", "b-2.x", "b-3.x"]),
    ("127.0.0.[1-2]", ["127.0.0.1", "127.0.0.2"]),
])
def test_slurm_node_lists_are_expanded(text, hosts):
    assert slurm.expand_nodelist(text) == hosts


@pytest.mark.parametrize("text,words", [
    ("gpu[01-03", "unbalanced '['"), ("gpu01]", "unbalanced ']'"), ("gpu[3-1]", "runs backwards"),
    ("gpu[a-b]", "cannot read 'a-b'"), ("a,,b", "empty name"),
])
def test_a_node_list_it_cannot_read_is_an_error(text, words):
    with pytest.raises(slurm.SlurmError, match=re.escape(words)):
        slurm.expand_nodelist(text)


def test_a_step_is_read_from_sruns_variables():
    step = slurm.detect(step_env(3))
    assert step is not None
    assert (step.job_id, step.step_id, step.node_rank, step.nnodes, step.head, step.host, step.rdzv_id) == (
        "4242", "0", 3, 5, "gpu01", "gpu07", "4242.0")
    assert slurm.detect({}) is None  # not under Slurm
    batch = {k: v for k, v in step_env(0).items() if "STEP" not in k}  # the batch script itself: no step
    assert slurm.detect(batch) is None


def test_slurm_fills_in_the_node_flags_and_flags_win():
    ns = run_parser().parse_args([SCRIPT])
    n = options(ns, step_env(2)).nodes
    assert n is not None and (n.backend, n.endpoint, n.node_rank, n.min_nodes, n.max_nodes, n.rdzv_id, n.host) == (
        "static", "gpu01:29500", 2, 5, 5, "4242.0", "gpu03")
    assert n.slurm == "job 4242 step 0, node 2"
    ns = run_parser().parse_args(["--rdzv-backend", "c10d", "--master-port", "29600", SCRIPT])
    n = options(ns, step_env(2)).nodes
    assert n is not None and (n.backend, n.endpoint, n.node_rank) == ("c10d", "gpu01:29600", None)
    ns = run_parser().parse_args(["--rdzv-backend=c10d", "--rdzv-endpoint=login:1234", "--rdzv-id=x", SCRIPT])
    n = options(ns, step_env(2)).nodes
    assert n is not None and (n.endpoint, n.rdzv_id) == ("login:1234", "x")
    one = step_env(0, nodelist="gpu01", nnodes=1)
    assert options(run_parser().parse_args([SCRIPT]), one).nodes is None  # a one-node step: an ordinary run


BAD = [
    ({"SLURM_STEP_NUM_TASKS": "10", "SLURM_NTASKS": "10", "SLURM_STEP_TASKS_PER_NODE": "2(x5)"},
     "runs 10 tasks on 5 node(s); mpwatch starts the workers itself and needs one task per node"),
    ({"SLURM_STEP_TASKS_PER_NODE": "1(x4),2", "SLURM_STEP_NUM_TASKS": "", "SLURM_NTASKS": ""},
     "runs tasks per node 1(x4),2 on 5 node(s)"),
    ({"SLURM_NODEID": ""}, "without SLURM_NODEID"),
    ({"SLURM_NODEID": "9"}, "SLURM_NODEID=9 is outside the step's 5 node(s)"),
    ({"SLURM_NODEID": "one"}, "SLURM_NODEID='one' is not a number"),
    ({"SLURM_STEP_NODELIST": "gpu[01-03", "SLURM_JOB_NODELIST": "", "SLURM_NODELIST": ""}, "unbalanced '['"),
    ({"SLURM_STEP_NODELIST": "", "SLURM_JOB_NODELIST": "", "SLURM_NODELIST": ""}, "without SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_NUM_NODES": "4"}, "SLURM_STEP_NUM_NODES=4 but the node list"),
]


@pytest.mark.parametrize("more,words", BAD, ids=[w[:30] for _, w in BAD])
def test_a_slurm_step_it_cannot_run_in_is_one_line_and_exit_2(tmp_path, more, words):
    env = dict(os.environ, **step_env(1, **more))
    res = mpwatch("--headless", SCRIPT, env=env, cwd=tmp_path)
    one_line_error(res, words)
    assert res.stderr.startswith("mpwatch: error: Slurm: ")


def test_nnodes_against_the_slurm_step_is_an_error(tmp_path):
    env = dict(os.environ, **step_env(1))
    one_line_error(mpwatch("--nnodes", "2", SCRIPT, env=env, cwd=tmp_path), "--nnodes 2 but the Slurm step has 5")


@pytest.mark.torch
@pytest.mark.timeout(240)
def test_two_nodes_from_slurms_variables_alone(tmp_path):
    need("torch", "several nodes meet in torch's rendezvous (the demo extra)")
    port = free_port()
    runs = []
    try:
        for node in (0, 1):  # the "hosts" 127.0.0.1 and 127.0.0.2, as Slurm would name two machines
            env = dict(os.environ, **step_env(node, nodelist="127.0.0.[1-2]", nnodes=2))
            run = HeadlessRun(tmp_path / f"node{node}", SCRIPT, "600", n=1, opts=["--master-port", port], env=env)
            run.tmp.mkdir()
            runs.append(run.start())
            wait_for(lambda run=run: registered(run) or run.proc.poll() is not None, 30, what="registration")
        infos = [wait_for(lambda r=r: node_info(r), 90, what="the first round") for r in runs]
        for node, info in enumerate(infos):
            assert (info["node_rank"], info["host"], info["job_id"], info["slurm"]) == (
                node, f"127.0.0.{node + 1}", "4242.0", f"job 4242 step 0, node {node}")
        wait_for(lambda: all(env_lines(r, 0) for r in runs), 60, what="the workers' environment")
        assert [env_lines(r, 0)[0]["RANK"] for r in runs] == ["0", "1"]
        assert {env_lines(r, 0)[0]["MASTER_ADDR"] for r in runs} == {"127.0.0.1"}  # the first node of the list
        runs[1].ctl("stop")
        assert [r.wait_exit(60) for r in runs] == [1, 1], explain(*runs)
    finally:
        for run in runs:
            run.cleanup()
