"""torchrun's launch surface: every flag spelling (dashes, underscores, PET_ variables),
-m, --no-python, the flags accepted without effect, the errors (one line, exit code 2),
and torchrun's environment in the workers of a one-node run."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from mpwatch.cli.args import relayed_flags, run_parser
from mpwatch.cli.launch import options
from tests.helpers import FIXTURES, ROOT, mpwatch, one_line_error
from tests.nodes.conftest import env_lines

pytestmark = pytest.mark.timeout(120)
SCRIPT = str(FIXTURES / "print_env.py")

# (spellings..., dest, value as typed, value parsed)
SPELLINGS = [
    (("-n", "--nprocs", "--nproc-per-node", "--nproc_per_node"), "nprocs", "3", 3),
    (("--nproc-per-node", "--nproc_per_node"), "nprocs", "auto", "auto"),
    (("--nnodes",), "nnodes", "2", (2, 2)),
    (("--nnodes",), "nnodes", "1:4", (1, 4)),
    (("--node-rank", "--node_rank"), "node_rank", "1", 1),
    (("--master-addr", "--master_addr"), "master_addr", "10.0.0.1", "10.0.0.1"),
    (("--master-port", "--master_port"), "master_port", "29501", 29501),
    (("--rdzv-backend", "--rdzv_backend"), "rdzv_backend", "c10d", "c10d"),
    (("--rdzv-endpoint", "--rdzv_endpoint"), "rdzv_endpoint", "head:29400", "head:29400"),
    (("--rdzv-id", "--rdzv_id"), "rdzv_id", "job9", "job9"),
    (("--rdzv-conf", "--rdzv_conf"), "rdzv_conf", "join_timeout=60,is_host=1",
     {"join_timeout": "60", "is_host": "1"}),
    (("--local-addr", "--local_addr"), "local_addr", "127.0.0.2", "127.0.0.2"),
    (("--max-restarts", "--max_restarts"), "max_restarts", "2", 2),
    (("--role",), "role", "trainer", "trainer"),
    (("--log-dir", "--log_dir"), "log_dir", "/tmp/logs", "/tmp/logs"),
    (("--shutdown-timeout", "--shutdown_timeout"), "shutdown_timeout", "7", 7.0),
    (("--monitor-interval", "--monitor_interval"), "noop_monitor_interval", "0.5", "0.5"),
    (("-r", "--redirects"), "noop_redirects", "3", "3"),
    (("-t", "--tee"), "noop_tee", "3", "3"),
    (("--start-method", "--start_method"), "noop_start_method", "fork", "fork"),
    (("--local-ranks-filter", "--local_ranks_filter"), "noop_local_ranks_filter", "0", "0"),
    (("--log-line-prefix-template", "--log_line_prefix_template"), "noop_log_line_prefix_template", "x", "x"),
]
SWITCHES = [(("-m", "--module"), "module"), (("--no-python", "--no_python"), "no_python"),
            (("--run-path", "--run_path"), "run_path"), (("--standalone",), "standalone"),
            (("--virtual-local-rank", "--virtual_local_rank"), "virtual_local_rank")]


@pytest.mark.parametrize("names,dest,typed,parsed", SPELLINGS, ids=[s[0][-1] + "=" + s[2] for s in SPELLINGS])
def test_every_spelling_of_a_valued_flag(names, dest, typed, parsed):
    for name in names:
        for argv in ([name, typed, "train.py"], [f"{name}={typed}", "train.py"] if name.startswith("--") else []):
            if not argv:
                continue
            ns = run_parser().parse_args([*argv, "--lr", "1"])
            assert getattr(ns, dest) == parsed, (argv, getattr(ns, dest))
            assert (ns.script, ns.args) == ("train.py", ["--lr", "1"])


@pytest.mark.parametrize("names,dest", SWITCHES, ids=[s[0][-1] for s in SWITCHES])
def test_every_spelling_of_a_switch(names, dest):
    assert getattr(run_parser().parse_args(["train.py"]), dest) is False
    for name in names:
        assert getattr(run_parser().parse_args([name, "train.py", "-m", "x"]), dest) is True


def test_torchruns_defaults_and_its_pet_variables(monkeypatch):
    ns = run_parser().parse_args([SCRIPT])
    assert (ns.nnodes, ns.node_rank, ns.rdzv_backend, ns.max_restarts, ns.role) == (None, None, None, 0, "default")
    opts = options(ns, {})
    assert opts.nodes is None and (opts.master_addr, opts.master_port, opts.launch) == ("127.0.0.1", None, "python")
    # torchrun takes every default from PET_<FLAG>: a torchrun environment works unchanged
    for name, value in {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_PORT": "29555",
                        "PET_NPROC_PER_NODE": "3", "PET_MODULE": "1", "PET_RDZV_ID": "pet"}.items():
        monkeypatch.setenv(name, value)
    ns = run_parser().parse_args(["pkg.train"])
    assert (ns.nnodes, ns.node_rank, ns.master_port, ns.nprocs, ns.module, ns.rdzv_id) == (
        (2, 2), 1, 29555, 3, True, "pet")
    assert run_parser().parse_args(["--node-rank", "0", "pkg.train"]).node_rank == 0  # a flag beats its variable


def test_the_flags_become_nodes_options_and_travel_to_a_separate_supervisor():
    ns = run_parser().parse_args(["--nnodes=2", "--node_rank", "1", "--master-addr", "head", "--master-port", "29501",
                                  "--local-addr", "10.1.1.2", "--rdzv-conf", "timeout=30", "--role", "r",
                                  "-m", "pkg.train", "--lr", "1"])
    opts = options(ns, {})
    n = opts.nodes
    assert n is not None and (n.backend, n.endpoint, n.node_rank, n.min_nodes, n.max_nodes, n.host) == (
        "static", "head:29501", 1, 2, 2, "10.1.1.2")
    assert n.conf == {"timeout": "30"} and opts.launch == "module" and opts.role == "r"
    # the TUI's launcher starts the supervisor with these flags: it must read the same options
    again = run_parser().parse_args([*relayed_flags(ns), "pkg.train", "--lr", "1"])
    relayed = options(again, {})
    assert (relayed.nodes, relayed.launch, relayed.role) == (n, "module", "r")
    ns = run_parser().parse_args(["--nnodes", "1:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", SCRIPT])
    n = options(ns, {}).nodes
    assert n is not None and (n.backend, n.endpoint, n.node_rank, n.min_nodes, n.max_nodes, n.rdzv_id) == (
        "c10d", "h:1", None, 1, 3, "none")


def test_a_module_runs_with_m_and_gets_torchruns_environment(headless, tmp_path):
    pkg = tmp_path / "r0" / "pkg"  # the run's cwd is r0: python -m finds pkg there
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text((FIXTURES / "print_env.py").read_text())
    run = headless("pkg.train", "0", n=2, opts=["-m", "--role", "trainer", "--rdzv-id", "job5",
                                                "--master-port", "29533", "--max-restarts", "2"])
    assert run.wait_exit(60) == 0, run.stderr_text
    for rank in (0, 1):
        env = env_lines(run, rank)[0]
        assert (env["RANK"], env["LOCAL_RANK"], env["ROLE_RANK"], env["GROUP_RANK"]) == (str(rank), str(rank),
                                                                                          str(rank), "0")
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["ROLE_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == (
            "2", "2", "2", "1")
        assert (env["ROLE_NAME"], env["TORCHELASTIC_RUN_ID"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (
            "trainer", "job5", "127.0.0.1", "29533")
        assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("0", "2")
        assert env["TORCHELASTIC_USE_AGENT_STORE"] is None  # one node: no store of the supervisor's
    st = json.loads((run.run_dir / "final.json").read_text())
    assert [w["global_rank"] for w in st["workers"]] == [0, 1] and st["run"]["node"] is None


@pytest.mark.parametrize("n,given,told", [(2, None, "1"), (2, "3", "3"), (1, None, None)],
                         ids=["several-unset", "several-set", "one-unset"])
def test_openmps_threads_are_torchruns_default(headless, n, given, told):
    """As torchrun: with more than one worker on the node and OMP_NUM_THREADS unset, each worker's is
    1 (each would start a thread per core), and the supervisor says so; the user's own value stands,
    and one worker is left alone."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if given is not None:
        env["OMP_NUM_THREADS"] = given
    run = headless(SCRIPT, "0", n=n, env=env)
    assert run.wait_exit(60) == 0, run.stderr_text
    assert [env_lines(run, rank)[0]["OMP_NUM_THREADS"] for rank in range(n)] == [told] * n
    said = "OMP_NUM_THREADS=1 for each worker, as torchrun sets it where several share a node"
    assert (said in run.stderr_text) == (given is None and n > 1), run.stderr_text
    assert (said in (run.run_dir / "supervisor.log").read_text()) == (given is None and n > 1)


def test_openmps_line_is_once_in_the_log_of_a_supervisor_the_tui_started(tmp_path):
    """The TUI starts its supervisor with stdout and stderr on supervisor.log (cli.tui_launch, whose
    claim and command line this is): the line the supervisor says on stderr is the log's line, not
    written a second time by its logger."""
    from mpwatch.cli.tui_launch import supervisor_argv
    from mpwatch.rundir import claim, writer
    from mpwatch.settings import Settings

    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    ns = run_parser().parse_args(["-n", "2", "--run-dir", str(tmp_path / "run"), SCRIPT, "0"])
    opts = options(ns, env)
    taken = claim.claim(opts.script, opts.nprocs, opts.cwd, Settings.from_env(env).tmpdir, ns.run_dir)
    try:
        with writer.open_supervisor_log(taken.fd) as log:
            code = subprocess.run(supervisor_argv(ns, opts, taken), stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=log, env=env, cwd=tmp_path, timeout=120).returncode
    finally:
        os.close(taken.fd)
    text = (taken.run_dir / "supervisor.log").read_text()
    assert code == 0, text
    assert text.count("OMP_NUM_THREADS=1 for each worker, as torchrun sets it") == 1, text
    assert "run ended: exit code 0" in text  # the supervisor's narration is in the file


def test_a_restarted_worker_is_told_its_restart_count(headless, tmp_path):
    run = headless(SCRIPT, "0", tmp_path, n=1, opts=["--max-restarts", "1"])  # fails once (a marker in tmp_path)
    assert run.wait_exit(60) == 0, run.stderr_text
    assert [e["TORCHELASTIC_RESTART_COUNT"] for e in env_lines(run, 0)] == ["0", "1"]


def test_no_python_runs_an_executable(headless, tmp_path):
    exe = tmp_path / "job.sh"
    exe.write_text('#!/bin/sh\necho "rank $RANK of $WORLD_SIZE local $LOCAL_RANK args $*"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    run = headless(exe, "a", "b", n=2, opts=["--no_python"])
    assert run.wait_exit(60) == 0, run.stderr_text
    assert run.log(1).strip() == "rank 1 of 2 local 1 args a b"


def test_virtual_local_rank_shows_each_worker_only_its_gpu(headless):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="4,6")
    run = headless(SCRIPT, n=2, opts=["--virtual-local-rank"], env=env)
    assert run.wait_exit(60) == 0, run.stderr_text
    assert [(e["LOCAL_RANK"], e["RANK"], e["CUDA_VISIBLE_DEVICES"]) for r in (0, 1) for e in env_lines(run, r)] == [
        ("0", "0", "4"), ("0", "1", "6")]


def test_flags_without_effect_are_said_in_one_line_and_the_run_goes_on(headless):
    run = headless(SCRIPT, n=1, opts=["--tee", "3", "--monitor_interval", "1", "--node-rank", "1",
                                      "--shutdown-timeout", "3"])
    assert run.wait_exit(60) == 0, run.stderr_text
    said = [ln for ln in run.stderr_text.splitlines() if "no effect" in ln]
    assert said == ["mpwatch: accepted, no effect here: --monitor-interval, --tee (mpwatch keeps each rank's "
                    "whole output in its run directory); --node-rank (one node: no rendezvous)"], run.stderr_text
    assert json.loads((run.run_dir / "run.json").read_text())["options"]["grace"] == 3.0  # --shutdown-timeout


def test_log_dir_holds_the_run_directory(tmp_path):
    res = mpwatch("--headless", "-n", "1", "--log-dir", tmp_path / "logs", SCRIPT, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "logs").iterdir()  # torchrun's folder of runs: this run's directory inside
    assert (run_dir / "rank-0" / "stdout.log").read_text().startswith("ENV {")
    assert json.loads((run_dir / "run.json").read_text())["run_id"] == run_dir.name


BAD = [
    (["-m", "--no-python", "pkg.train"], "-m/--module and --no-python cannot be used together"),
    (["--no_python", "-m", "pkg.train"], "-m/--module and --no-python cannot be used together"),
    (["-m", "not/a/module.py"], "-m needs a module name"),
    (["--no-python", "no-such-executable-here"], "--no-python: executable not found"),
    (["--no-python", SCRIPT], "--no-python: executable not executable"),
    (["-n", "lots", SCRIPT], "expected a whole number, got 'lots'"),
    (["--nnodes", "0", SCRIPT], "must be at least 1"),
    (["--nnodes", "4:2", SCRIPT], "MIN is above MAX"),
    (["--nnodes", "1:2:3", SCRIPT], "expected N or MIN:MAX"),
    (["--nnodes", "2", "--node-rank", "2", SCRIPT], "--node-rank 2 is outside --nnodes 2"),
    (["--nnodes", "2", "--rdzv-backend", "etcd", SCRIPT], "mpwatch runs on torch's static and c10d rendezvous"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", SCRIPT], "needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", "2", "--standalone", SCRIPT], "--standalone is a one-node run"),
    (["--master-port", "70000", SCRIPT], "a port is from 1 to 65535"),
    (["--rdzv-conf", "timeout", SCRIPT], "expected key=value pairs"),
]


@pytest.mark.parametrize("args,words", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_launch_flags_are_one_line_and_exit_2(tmp_path, args, words):
    one_line_error(mpwatch(*args, cwd=tmp_path), words)


def test_the_tuis_launcher_passes_torchruns_flags_to_the_supervisor(tmp_path):
    from mpwatch.cli.tui_launch import supervisor_argv
    from mpwatch.rundir.claim import Claim
    from mpwatch.settings import Settings

    ns = run_parser().parse_args(["--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv-endpoint", "h:5", "--no-python",
                                  "/bin/true", "x"])
    opts = options(ns, {})
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        argv = supervisor_argv(ns, opts, Claim("rid", tmp_path, fd, Settings().tmpdir))
    finally:
        os.close(fd)
    again = run_parser().parse_args(argv[3:])  # after python -m mpwatch
    assert again.supervise_only and (again.script, again.args) == ("/bin/true", ["x"])
    relayed = options(again, {})
    assert (relayed.nodes, relayed.launch) == (opts.nodes, "exec")


def test_one_node_stays_torch_free():
    # the supervisor's rooms import the multi-node ones, which load torch only on a node thread
    code = ("import sys, mpwatch.cli, mpwatch.cli.launch, mpwatch.supervisor.core;"
            "bad = [m for m in sys.modules if m.split('.')[0] == 'torch']; print(bad); sys.exit(bool(bad))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
