"""Torch imported once (issue 43): the run's forkserver imports what every worker imports and
forks each worker, launched, restarted or added by a resize; a forked worker is what exec
would have made it (the same probe, fixtures/preload_probe.py, sees the same in both); where
forking cannot hold the run starts its workers by exec and says so once; the forkserver is the
supervisor's child and ends with it. Preloading `json` (the standard library's) makes the
forkserver serve scripts without torch, cheaply; the torch cases need torch."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal

import psutil
import pytest

from mpwatch.sources.local import Client
from tests.helpers import FIXTURES, alive, assert_run_gone, helpers_of, need, wait_for

pytestmark = pytest.mark.timeout(240)
PROBE = FIXTURES / "preload_probe.py"
# Differ between any two runs (their ids, sockets, keys, directories, ports), not between ways of starting.
PER_RUN = {"MPWATCH_CHANNEL", "MPWATCH_AUTHKEY", "MPWATCH_RUN_ID", "MPWATCH_STACK_FILE",
           "MPWATCH_SUPERVISOR_PID", "MPWATCH_MEMORY_DIR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}


def seen(run, rank: int) -> dict:
    text = wait_for(lambda: (lambda t: t if "DUMPED" in t else None)(run.log(rank)), 120,
                    what=f"rank {rank}'s probe")
    return json.loads(re.search(r"^SEEN (.*)$", text, re.M).group(1))


def comparable(s: dict, run) -> dict:
    """What two ways of starting must agree on: run-specific values named, pids left out."""
    out = dict(s)
    for key in ("pid", "ppid"):
        out.pop(key)
    out["environ"] = {k: (v if k not in PER_RUN else "RUN") for k, v in s["environ"].items()}
    out["path"] = [p.replace(str(run.tmp), "TMP") for p in s["path"]]
    for key in ("argv", "orig_argv"):
        out[key] = [a.replace(str(run.tmp), "TMP") for a in s[key]]
    for key in ("path0", "file", "cwd", "cmdline"):
        out[key] = s[key].replace(str(run.tmp), "TMP") if s[key] else s[key]
    # 0-3 are the worker's by number; past them what is open counts, not the number the channel's
    # socket got (in a fork, the number may be one the forkserver's request had just given back)
    fds = {k: v.replace(str(run.tmp), "TMP") for k, v in s["fds"].items()}
    out["fds"] = ({k: v for k, v in fds.items() if int(k) <= 3}, sorted(v for k, v in fds.items() if int(k) > 3))
    return out


def forkserver_of(run) -> int:
    return run.wait_event("preloaded", timeout=120)[0]["pid"]


def two_ways(headless, script, *args, opts=(), env=None, cwd=None, n=2):
    """The same script run forked (preloaded: `opts`) and by exec (`opts` and --no-preload): both
    runs, ended."""
    runs = []
    for extra in (list(opts), [*opts, "--no-preload"]):
        run = headless(script, *args, n=n, opts=extra, env=env, start=False)
        if cwd is not None:
            run.cwd = cwd
        run.start()
        run.wait_exit(180)
        runs.append(run)
    return runs


# A preload that changes what it should not: each child puts it back as exec would have had it.
MEDDLES = """import os, resource, signal, sys
signal.signal(signal.SIGTERM, lambda *a: None)
signal.signal(signal.SIGUSR2, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 64), hard))
os.umask(0o077)
os.chdir("/")
os.environ["MEDDLED"] = "1"
sys.path.append("/meddled")
sys.argv.append("meddled")
"""


@pytest.mark.parametrize("launch", ["script", "module"])
def test_a_forked_worker_sees_what_an_execd_one_sees(headless, tmp_path, launch):
    """argv, sys.path, __main__, signal dispositions and mask, its own session, cwd, umask, limits,
    environment, descriptors, threads, the parent-death signal, /proc/self/cmdline and environ,
    stdout's buffering, the start-up hook's stack dumps; and how it ends (a traceback, exit codes,
    KeyboardInterrupt's death by SIGINT); whatever a preload changed of these."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "meddles.py").write_text(MEDDLES)
    shutil.copy(PROBE, pkg / "probe.py")
    opts = ["--preload", "json", "--preload", "pkg.meddles"]
    script, opts = (str(pkg / "probe.py"), opts) if launch == "script" else ("pkg.probe", [*opts, "-m"])
    ends = ("raise", "interrupt", "exit:3")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    forked, execd = two_ways(headless, script, *ends, opts=opts, cwd=tmp_path, n=3, env=env)
    pid = forkserver_of(forked)
    assert not execd.events("preloaded")
    for rank in range(3):
        f, e = seen(forked, rank), seen(execd, rank)
        assert f["ppid"] == pid and e["ppid"] == execd.proc.pid  # forked, and exec'd
        assert comparable(f, forked) == comparable(e, execd)
        assert f["proc_rank"] == str(rank) and f["pdeathsig"] == signal.SIGKILL and f["leads"]
        assert "DUMPED True" in forked.log(rank)
    ended = {(r["rank"], r["exit_code"], r["signal"]) for r in forked.events("worker_exited")}
    assert ended == {(r["rank"], r["exit_code"], r["signal"]) for r in execd.events("worker_exited")}
    assert ended == {(0, 1, None), (1, None, "SIGINT"), (2, 3, None)}
    assert forked.log(0, "stderr").replace(str(forked.tmp), "TMP") == \
        execd.log(0, "stderr").replace(str(execd.tmp), "TMP")
    assert "ValueError: the probe fails on purpose" in forked.log(0, "stderr")
    assert "forkserver" not in forked.log(0, "stderr")  # none of its own frames


def test_torch_is_imported_once_and_the_hooks_are_in(headless, tmp_path):
    need("torch")
    probe = tmp_path / "probe_torch.py"  # imports torch at its top: the forkserver preloads it by itself
    probe.write_text(PROBE.read_text().replace(  # an optimizer named: torch._dynamo follows torch (preload.detect)
        '\nimport mpwatch  # noqa: E402\n',
        '\nimport torch  # noqa: E402, F401\nOPTIMIZERS = torch.optim\nimport mpwatch  # noqa: E402\n'))
    forked, execd = two_ways(headless, probe, env=dict(os.environ, TORCH="1"))
    pre = forked.wait_event("preloaded")[0]
    assert pre["modules"] == ["torch", "torch._dynamo"]  # what torch imports at a worker's first optimizer, too
    for rank in range(2):
        f, e = seen(forked, rank), seen(execd, rank)
        # imported before its first line: the forkserver's
        assert f["torch_loaded"] and f["dynamo_loaded"] and not e["torch_loaded"] and not e["dynamo_loaded"]
        assert f["auto_hooked"] and e["auto_hooked"] and not f["cuda_initialised"]
        assert f["ppid"] == pre["pid"]
        for key in ("torch_loaded", "dynamo_loaded"):
            f.pop(key), e.pop(key)
        assert comparable(f, forked) == comparable(e, execd)
    assert forked.wait_exit() == execd.wait_exit() == 0


def test_restarted_and_resized_ranks_are_forked_too(headless, tmp_path):
    """A rank restarted after a failure and a rank added by `resize` (independent) are forks."""
    script = tmp_path / "once.py"
    script.write_text("import os, sys, time\nimport mpwatch\n"
                      "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and os.environ['RANK'] == '1':\n"
                      "    sys.exit(1)\n"
                      "while True:\n    mpwatch.report(step=1, loss=1.0)\n    time.sleep(0.1)\n")
    run = headless(script, n=2, opts=["--preload", "json", "--max-restarts", "1",
                                      "--resize-mode", "independent"])
    pid = forkserver_of(run)
    run.wait_event("restarted", timeout=60)
    wait_for(lambda: all(w["state"] == "running" and w["reports"] for w in run.status()["workers"]), 60,
             what="both ranks reporting")
    run.ctl("resize", "3")
    wait_for(lambda: len([w for w in run.status()["workers"] if w["reports"]]) == 3, 60,
             what="rank 2 reporting")
    for w in run.status()["workers"]:
        assert psutil.Process(w["pid"]).ppid() == pid, w
    assert [p for p in psutil.Process(run.proc.pid).children() if p.pid not in helpers_of(run.proc.pid)] == []
    run.ctl("stop")
    run.wait_exit()
    run.assert_gone(pid)


def test_the_forkserver_dies_with_its_supervisor(headless, tmp_path):
    script = tmp_path / "forever.py"
    script.write_text("import time\nimport mpwatch\n"
                      "while True:\n    mpwatch.report(step=1)\n    time.sleep(0.1)\n")
    run = headless(script, n=2, opts=["--preload", "json"])
    pid = forkserver_of(run)
    assert pid in helpers_of(run.proc.pid)  # the supervisor's own child
    wait_for(lambda: all(w["reports"] for w in run.status()["workers"]), 60, what="both ranks reporting")
    workers = run.all_pids()
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait()
    assert_run_gone(run.run_id, {pid, *workers})


@pytest.mark.parametrize("opts, why", [
    (["--preload", "no_such_module_mpwatch"], "--preload no_such_module_mpwatch: ModuleNotFoundError"),
    (["--preload", "starts_a_thread"], "a preload started a thread (busy)"),
    (["--preload", "imports_mpwatch"], "a preload imported mpwatch"),
])
def test_a_preload_that_fails_falls_back_to_exec_and_says_so_once(headless, tmp_path, opts, why):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "starts_a_thread.py").write_text("import threading, time\n"
                                            "threading.Thread(target=time.sleep, args=(60,), name='busy', "
                                            "daemon=True).start()\n")
    (mods / "imports_mpwatch.py").write_text("import mpwatch\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(mods), os.environ.get("PYTHONPATH", "")]))
    run = headless(FIXTURES / "reporter.py", "5", n=2, opts=opts, env=env)
    assert run.wait_exit(120) == 0
    said = run.events("preload_fallback")
    assert len(said) == 1 and said[0]["why"].startswith(why), said
    assert run.stderr_text.count("workers start by exec, each importing for itself") == 1
    assert not run.events("preloaded")
    assert all(alive(p) is False for p in run.all_pids())


def test_no_python_with_a_preload_falls_back_and_no_preload_starts_no_forkserver(headless, tmp_path):
    run = headless("/bin/sh", "-c", "exit 0", n=1, opts=["--no-python", "--preload", "json"])
    assert run.wait_exit(60) == 0
    assert run.events("preload_fallback")[0]["why"].startswith("--no-python runs an executable")
    plain = headless(FIXTURES / "reporter.py", "3", n=1, opts=["--preload", "json", "--no-preload"])
    assert plain.wait_exit(60) == 0
    assert not plain.events("preloaded") and not plain.events("preload_fallback")


def test_what_the_forkserver_printed_as_it_started_each_worker_prints(headless, tmp_path):
    """A user's sitecustomize that fails says so on each worker's stderr, as without mpwatch."""
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("print('HELLO FROM SITE')\n"
                                             "raise RuntimeError('boom in the user hook')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(theirs), os.environ.get("PYTHONPATH", "")]))
    runs = two_ways(headless, FIXTURES / "reporter.py", "3", opts=["--preload", "json"], env=env)
    for rank in range(2):
        f, e = (r.log(rank, "stderr") for r in runs)
        assert "Error in sitecustomize; set PYTHONVERBOSE for traceback:" in f and f == e
        assert runs[0].log(rank).startswith("HELLO FROM SITE")
    assert runs[0].events("preloaded")


def test_a_stop_while_the_forkserver_imports_ends_the_run_at_once(headless, tmp_path):
    """The launch waits for the forkserver; a stop meanwhile starts no worker and kills it."""
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(120)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    run = headless(FIXTURES / "reporter.py", "5", n=2, opts=["--preload", "slow_import"], env=env)
    server = wait_for(lambda: helpers_of(run.proc.pid) and [
        p for p in helpers_of(run.proc.pid) if "exec(input())" in psutil.Process(p).cmdline()], 30,
        what="the forkserver")[0]
    with Client.at(run.run_dir) as client:
        assert client.status()["workers"] == []  # nothing started while it imports
    run.ctl("stop")
    assert run.wait_exit(20) == 1
    assert not run.events("worker_started")
    run.assert_gone(server)


def test_a_worker_whose_request_does_not_fit_starts_by_exec_and_the_run_says_so(headless, tmp_path):
    """An environment past what one packet of the forkserver's socket holds: that worker is exec'd."""
    big = {f"BIG_{i}": "x" * 100_000 for i in range(11)}  # past MAX_MSG, within exec's own bound
    run = headless(FIXTURES / "reporter.py", "3", n=2, opts=["--preload", "json"], env=dict(os.environ, **big))
    assert run.wait_exit(60) == 0, run.stderr_text
    said = run.events("preload_fallback")
    assert len(said) == 1 and "does not fit the forkserver's socket" in said[0]["why"], said
    assert run.events("preloaded")  # it served; these workers were exec'd


def test_the_scripted_gpu_finds_forked_ranks_as_it_finds_execd_ones(headless, tmp_path, libnvml):
    """The scripted NVML (tests without a GPU) names a rank's process among the supervisor's
    children; a forked worker is the forkserver's: it is found there."""
    from tests.supervisor.test_gpu_run import GiB, gpu_env

    env = gpu_env(libnvml, tmp_path, {"gpus": [{"name": "Fake 10G", "mem_total": 10 * GiB}], "frames": [{"gpus": [
        {"processes": [{"pid": "rank:0", "mem": 2 * GiB}, {"pid": "rank:1", "mem": GiB}]}]}]})
    run = headless(FIXTURES / "reporter.py", "100000", n=2, opts=["--preload", "json", "--gpu-interval", "0.1"],
                   env=env)
    forkserver_of(run)
    views = wait_for(lambda: (lambda ws: ws if all(w["gpu"] for w in ws) else None)(run.status()["workers"]), 60,
                     what="both ranks on GPU 0")
    assert {w["rank"]: w["gpu"]["mem_bytes"] for w in views} == {0: 2 * GiB, 1: GiB}


def test_a_fork_that_speaks_at_once_is_its_ranks_own(headless, tmp_path):
    """A forked worker connects and reports within a millisecond, often before the supervisor
    has its pid: its hello and its first report are still its rank's own (the rank can be asked
    at once, its one report counted), never a stranger's or lost."""
    need("torch")  # a fork of torch's forkserver (its page tables the most to copy) speaks first most often
    script = tmp_path / "at_once.py"
    script.write_text("import time\nimport torch  # noqa: F401\nimport mpwatch\nmpwatch.report(step=7, loss=0.5)\n"
                      "while True:\n    mpwatch.should_checkpoint()\n    time.sleep(0.05)\n")
    run = headless(script, n=4)
    pid = forkserver_of(run)
    wait_for(lambda: all(w["step"] == 7 and w["reports"] == 1 for w in run.status()["workers"]), 60,
             what="every rank's one report")
    res = run.ctl("checkpoint", "all")
    assert "cannot ask" not in res.stdout and "not connected" not in res.stdout, res.stdout
    for w in run.status()["workers"]:
        assert psutil.Process(w["pid"]).ppid() == pid, w
        assert w["children"] == [], w  # its own process, not a child of its rank
    run.ctl("stop")
    run.wait_exit()
    run.assert_gone(pid)


def test_what_follows_a_preload_is_imported_softly(monkeypatch):
    """worker.boot.forkserver: a module that follows a preload (torch._dynamo after torch) is imported
    with it where it can be, and listed; one that fails to import is left to the workers, and the
    preload stands (torch's case runs above: the forked ranks have torch._dynamo at their first line)."""
    import importlib.util
    from pathlib import Path

    from mpwatch.supervisor import spawn

    spec = importlib.util.spec_from_file_location("_forkserver_under_test", Path(spawn.INJECT_DIR) / "forkserver.py")
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    assert server.FOLLOWERS == {"torch": ("torch._dynamo",)}
    monkeypatch.setattr(server, "FOLLOWERS", {"json": ("mpwatch_no_such_module", "json.tool")})
    loaded: list[str] = []
    server._preload(["json"], loaded, False)  # the workers build nothing that imports it: not followed
    assert loaded == ["json"]
    loaded.clear()
    why = server._preload(["json"], loaded, True)
    assert loaded == ["json", "json.tool"]
    assert why is None or not why.startswith("--preload")  # (this pytest's threads may be named: not the preload)
