"""Issue 2: the worker API — a no-op outside mpwatch, non-blocking and fork-aware inside."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import types
from multiprocessing.connection import Listener

import pytest

from mpwatch.contract import protocol
from mpwatch.supervisor.workers import batch_check
from tests.documented import BUFFER_REPORTS
from tests.helpers import ROOT, wait_for

KEY = os.urandom(16)


def run_worker(code: str, env_extra: dict, timeout=60, args=()):
    """Run `code` as a worker (`args` its sys.argv[1:]); in its own process group, ended whole
    on a timeout (a child it forked, hung, must not outlive the test)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    with subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def channel_env(address, rank=0):
    return {protocol.ENV_ADDRESS: address, protocol.ENV_AUTHKEY: KEY.hex(), protocol.ENV_RANK: str(rank)}


def test_outside_mpwatch_report_and_phase_are_noops():
    res = run_worker("""
        import threading, mpwatch
        assert not mpwatch.active()
        assert mpwatch.report(step=1, loss=0.5, acc=1) is None
        with mpwatch.phase("data"):
            pass
        assert threading.active_count() == 1, "no sender thread outside mpwatch"
        import sys
        assert "torch" not in sys.modules and "textual" not in sys.modules
        print("ok")
    """, {})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def collect(listener, n_conns, out):
    for _ in range(n_conns):
        conn = listener.accept()
        msgs = []
        out.append(msgs)

        def read(c=conn, m=msgs):
            while True:
                try:
                    m.append(json.loads(c.recv_bytes()))
                except (EOFError, OSError):
                    return
        threading.Thread(target=read, daemon=True).start()


def listening(tmp_path, n_conns: int):
    """(address, listener, conns, thread): a channel address and a thread collecting the
    messages of its first n_conns connections into conns."""
    address = str(tmp_path / "chan")
    listener = Listener(address, family="AF_UNIX", authkey=KEY)
    conns = []
    t = threading.Thread(target=collect, args=(listener, n_conns, conns), daemon=True)
    t.start()
    return address, listener, conns, t


def read_until_bye(t, conns):
    t.join(timeout=30)
    wait_for(lambda: conns and conns[0] and conns[0][-1]["t"] == "bye", what="the channel read")


def test_reports_phases_and_forked_children_use_their_own_channels(tmp_path):
    address, listener, conns, t = listening(tmp_path, 2)
    res = run_worker("""
        import os, time, mpwatch
        for i in range(5):
            with mpwatch.phase("compute"):
                time.sleep(0.01)
            mpwatch.report(step=i, loss=1.0 / (i + 1), lr=0.1)
        pid = os.fork()
        if pid == 0:
            mpwatch.report(step=100, loss=9.0)
            raise SystemExit(0)  # a normal exit: atexit flushes the child's channel
        os.waitpid(pid, 0)
        print(os.getpid())
    """, channel_env(address, rank=3))
    assert res.returncode == 0, res.stderr
    t.join(timeout=30)
    # Both processes exited normally, so each channel ends with "bye" once fully read.
    wait_for(lambda: len(conns) == 2 and all(m and m[-1]["t"] == "bye" for m in conns), what="both channels read")
    worker_pid = int(res.stdout.split()[-1])
    by_pid = {}
    for msgs in conns:
        hello = msgs[0]
        assert hello["t"] == "hello" and hello["rank"] == 3
        by_pid[hello["pid"]] = msgs
    assert worker_pid in by_pid and len(by_pid) == 2
    child_pid = next(p for p in by_pid if p != worker_pid)
    reports = [r for m in by_pid[worker_pid] if m["t"] == "batch" for r in m["reports"]]
    assert [r[1] for r in reports] == [0, 1, 2, 3, 4]
    assert reports[-1][3] == {"lr": 0.1}
    batches = [m for m in by_pid[worker_pid] if m["t"] == "batch"]
    assert sum(b["dropped"] for b in batches) == 0
    assert batches[-1]["phases"]["compute"] >= 0.05
    child = [r for m in by_pid[child_pid] if m["t"] == "batch" for r in m["reports"]]
    assert child[-1][1] == 100
    assert by_pid[child_pid][0]["ppid"] == worker_pid
    listener.close()


# The sender's imports a fork may land in: the CUDA view's module (its first flush in a torch
# script), and hmac, which multiprocessing's handshake imports inside Client() as the sender
# connects (its first report).
LAZY = ["mpwatch.worker.cuda", "hmac"]


@pytest.mark.parametrize("module", LAZY)
def test_a_fork_while_the_sender_imports_leaves_the_child_a_working_channel(tmp_path, module):
    # A fork inside one of the sender's imports gave the child that module's lock, held by a
    # thread the child does not have: the child's flush hung on it for ever and its reports were
    # lost (seen in CI: a Hogwild trainer of demo/independent.py never ended). In the handshake's
    # import of hmac, the child's sender, whose thread may get the parent's sender's ident, took
    # the half-made module (an import cycle to importlib) and failed every connection: a Hogwild
    # child beside busy processes never reported (tests/supervisor/test_slow_start.py, 3 runs of
    # 12 with six CPU burners). Here the import is held open (1 s) and the fork lands inside it,
    # every time.
    address, listener, conns, t = listening(tmp_path, 2)
    res = run_worker("""
        import importlib.abc, importlib.machinery, os, sys, threading, time, types
        entered = threading.Event()
        MODULE = sys.argv[1]

        class Slow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != MODULE:
                    return None
                sys.meta_path.remove(self)
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                real = spec.loader

                class Loader(importlib.abc.Loader):
                    def create_module(self, spec):
                        return real.create_module(spec)

                    def exec_module(self, module):
                        entered.set()
                        time.sleep(1.0)
                        real.exec_module(module)
                spec.loader = Loader()
                return spec

        assert MODULE not in sys.modules
        sys.meta_path.insert(0, Slow())
        sys.modules["torch"] = types.ModuleType("torch")  # a torch script: the sender reads the CUDA view
        import mpwatch
        mpwatch.report(step=0, loss=1.0)
        assert entered.wait(30), "the sender never imported " + MODULE
        pid = os.fork()  # inside the sender's import
        if pid == 0:
            mpwatch.report(step=1, loss=0.5)
            raise SystemExit(0)
        _, status = os.waitpid(pid, 0)
        print(os.getpid(), os.waitstatus_to_exitcode(status))
    """, channel_env(address, rank=0), args=[module])
    assert res.returncode == 0, res.stderr
    worker_pid, child_exit = map(int, res.stdout.split())
    assert child_exit == 0
    t.join(timeout=30)
    wait_for(lambda: len(conns) == 2 and all(m and m[-1]["t"] == "bye" for m in conns), what="both channels read")
    child = next(m for m in conns if m[0]["pid"] != worker_pid)
    assert [r[1] for m in child if m["t"] == "batch" for r in m["reports"]] == [1]
    listener.close()


def test_report_never_blocks_when_the_supervisor_does_not_read(tmp_path):
    address = str(tmp_path / "chan")
    listener = Listener(address, family="AF_UNIX", authkey=KEY)
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    # 200k reports with fat metrics fill the socket buffer many times over; the loop must still end
    # (the sender thread blocks, the deque drops its oldest entries) and so must the process.
    res = run_worker("""
        import mpwatch
        pad = "x" * 200
        for i in range(200_000):
            mpwatch.report(step=i, loss=0.5, pad=pad)
        print("done")
    """, channel_env(address), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "done"
    listener.close()


def test_report_never_blocks_when_the_supervisor_is_gone(tmp_path):
    res = run_worker("""
        import mpwatch
        for i in range(100_000):
            mpwatch.report(step=i, loss=0.5)
        print("done")
    """, channel_env(str(tmp_path / "nobody-listens")))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "done"


def test_tensor_like_loss_is_converted_off_the_hot_path(tmp_path):
    address, listener, conns, t = listening(tmp_path, 1)
    res = run_worker("""
        import mpwatch
        class FakeTensor:  # what report() relies on: detach() and float()
            def __init__(self, v): self.v = v
            def detach(self): return FakeTensor(self.v)
            def __float__(self): return self.v
        mpwatch.report(step=1, loss=FakeTensor(0.75))
    """, channel_env(address))
    assert res.returncode == 0, res.stderr
    read_until_bye(t, conns)
    reports = [r for m in conns[0] if m["t"] == "batch" for r in m["reports"]]
    assert reports[0][2] == 0.75
    listener.close()


def test_a_fast_loop_is_folded_without_losing_a_count_a_loss_or_a_metric(tmp_path):
    address, listener, conns, t = listening(tmp_path, 1)
    # 300 reports inside one flush interval: every other one has no loss, one carries a metric
    # that is never reported again. The batch is folded, and nothing the supervisor shows is lost.
    res = run_worker("""
        import mpwatch
        for i in range(300):
            if i % 2:
                mpwatch.report(lr=0.1)
            else:
                mpwatch.report(step=i, loss=float(i))
            if i == 37:
                mpwatch.report(val_acc=0.5)
    """, channel_env(address))
    assert res.returncode == 0, res.stderr
    read_until_bye(t, conns)
    batches = [m for m in conns[0] if m["t"] == "batch"]
    entries = [batch_check.validate_batch(b) for b in batches]
    flat = [e for es in entries for e in es]
    assert sum(e[4] for e in flat) == 301
    assert sum(b["dropped"] for b in batches) == 0
    assert any(len(es) == 8 and sum(e[4] for e in es) > 8 for es in entries), "a long batch is folded"
    assert all(e[2] is not None and e[1] is not None for e in flat), "each group keeps its last loss and step"
    assert flat[-1][1] == 298 and flat[-1][2] == 298.0
    assert any(e[3].get("val_acc") == 0.5 for e in flat)
    steps = [e[1] for e in flat]
    assert steps == sorted(steps)
    listener.close()


# ------------------------------------------------------------ the CUDA view ----
def test_the_scripted_cuda_view_rides_with_the_batches_at_most_once_a_second(tmp_path):
    scen = tmp_path / "cuda.json"
    scen.write_text(json.dumps({"ranks": {"2": [
        {"at": 0, "device": 1, "uuid": "GPU-x", "allocated": 100, "reserved": 300, "max_allocated": 200},
        {"at": 1.0, "alloc_retries": 4, "num_ooms": 1, "inactive_split": 50}]}}))
    address, listener, conns, t = listening(tmp_path, 1)
    stop = tmp_path / "stop"

    def cuda_views() -> list[dict]:
        return [m["cuda"] for m in (conns[0] if conns else []) if m["t"] == "batch" and "cuda" in m]

    def views_seen():
        """The worker reports until the scenario's second frame has ridden in a view, the third
        (its own clock keeps views a second apart however slow the box: a fixed 2.6 s loop that
        needed two 0.85 s gaps failed under load)."""
        try:
            wait_for(lambda: (lambda v: len(v) >= 3 and v[-1]["alloc_retries"] == 4)(cuda_views()), 60,
                     what="three CUDA views, the last from the scenario's second frame")
        finally:
            stop.write_text("")
    watcher = threading.Thread(target=views_seen, daemon=True)
    watcher.start()
    res = run_worker(f"""
        import os, time, mpwatch
        t0 = time.monotonic()
        while not os.path.exists({str(stop)!r}) and time.monotonic() - t0 < 90:
            mpwatch.report(step=1, loss=0.5)
            time.sleep(0.02)
    """, dict(channel_env(address, rank=2), MPWATCH_SCRIPTED_CUDA=str(scen), MPWATCH_FLUSH_S="0.1"), timeout=120)
    assert res.returncode == 0, res.stderr
    watcher.join(30)
    read_until_bye(t, conns)
    views = [m["cuda"] for m in conns[0] if m["t"] == "batch" and "cuda" in m]
    batches = [m for m in conns[0] if m["t"] == "batch"]
    assert len(views) >= 2 and len(batches) >= 2 * len(views)
    # at most one view a second, by the worker's own clock (its reports' times in the batches
    # that carry one; a batch is sent at most a flush, 0.1 s, after its last report)
    sent = [m["reports"][-1][0] for m in batches if "cuda" in m and m["reports"]]
    assert len(sent) == len(views) and all(b - a >= 0.85 for a, b in zip(sent, sent[1:])), sent
    assert views[0] == {"device": 1, "uuid": "GPU-x", "allocated": 100, "reserved": 300, "max_allocated": 200,
                        "alloc_retries": 0, "num_ooms": 0, "inactive_split": 0}
    assert views[-1]["alloc_retries"] == 4 and views[-1]["num_ooms"] == 1 and views[-1]["inactive_split"] == 50
    listener.close()


class _Props:
    def __init__(self, uuid):
        self.uuid = uuid


class _FakeUuid:  # torch's _CUuuid prints without the "GPU-" NVML puts in front
    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


def _stats(reserved, allocated=0, **flat):
    return {"reserved_bytes": {"all": {"current": reserved}},
            "allocated_bytes": {"all": {"current": allocated, "peak": allocated + 1}},
            "inactive_split_bytes": {"all": {"current": flat.get("split", 0)}},
            "num_alloc_retries": flat.get("retries", 0), "num_ooms": flat.get("ooms", 0)}


def stand_in_torch(initialized=True, stats=None, uuids=None):
    """A stand-in `torch` with the torch.cuda calls TorchCuda makes (there is no CUDA here)."""
    calls = []
    cuda = types.SimpleNamespace(
        is_initialized=lambda: initialized,
        device_count=lambda: len(stats),
        memory_stats_as_nested_dict=lambda d: calls.append(("stats", d)) or stats[d],
        get_device_properties=lambda d: calls.append(("props", d)) or _Props(_FakeUuid(uuids[d])),
        init=lambda: calls.append("init"))
    return types.SimpleNamespace(cuda=cuda), calls


def test_torch_cuda_view_reads_the_busiest_device_once_per_call(monkeypatch):
    from mpwatch.worker.cuda import TorchCuda

    torch, calls = stand_in_torch(stats=[_stats(0), _stats(5 << 30, 3 << 30, retries=2, ooms=1, split=7)],
                                  uuids=["aaaa", "bbbb"])
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    view = TorchCuda()
    v = view()
    assert v == {"device": 1, "allocated": 3 << 30, "reserved": 5 << 30, "max_allocated": (3 << 30) + 1,
                 "uuid": "GPU-bbbb", "alloc_retries": 2, "num_ooms": 1, "inactive_split": 7}
    calls.clear()
    view()
    assert calls == [("stats", 1)]  # one stats call a view; the device and its UUID are cached
    assert "init" not in calls


def test_torch_cuda_view_never_initialises_cuda_and_names_a_mig_instance(monkeypatch):
    from mpwatch.worker.cuda import TorchCuda

    torch, calls = stand_in_torch(initialized=False, stats=[_stats(1)], uuids=["aaaa"])
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert TorchCuda()() is None and calls == []
    torch, calls = stand_in_torch(stats=[_stats(1 << 20)], uuids=["parent-gpu"])
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234-abcd")
    assert TorchCuda()()["uuid"] == "MIG-1234-abcd"
    torch.cuda.memory_stats_as_nested_dict = lambda d: 1 / 0  # whatever torch raises stays in the sender
    assert TorchCuda()() is None
    monkeypatch.delitem(sys.modules, "torch")
    assert TorchCuda()() is None


@pytest.mark.parametrize("n", [BUFFER_REPORTS, BUFFER_REPORTS + 1])
def test_reports_wait_for_a_held_up_sender_up_to_the_documented_number(tmp_path, n):
    """README: a sender held up keeps the documented number of reports for it; past them the
    oldest go, counted. The channel's listener never accepts until the loop has reported: the
    sender's handshake waits meanwhile (a supervisor slow to answer), then ships what it kept."""
    address = str(tmp_path / "chan")
    listener = Listener(address, family="AF_UNIX", authkey=KEY)
    reported, go = tmp_path / "reported", tmp_path / "go"
    conns: list = []
    code = f"""
        import os, time, mpwatch
        for i in range({n}):
            mpwatch.report(step=i, loss=0.5, **({{"first": 1}} if i == 0 else {{}}))
        open({str(reported)!r}, "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
    """
    done: dict = {}
    t = threading.Thread(target=lambda: done.update(res=run_worker(code, channel_env(address), timeout=120)))
    t.start()

    def shipped() -> tuple[int, int]:
        """(the reports the batches stand for, those they say were dropped)"""
        batches = [b for m in list(conns) for b in list(m) if b["t"] == "batch"]
        return (sum(e[4] if len(e) == 5 else 1 for b in batches for e in b["reports"]),
                sum(b["dropped"] for b in batches))
    try:
        wait_for(reported.exists, 60, what="the loop's reports")
        collect(listener, 1, conns)
        wait_for(lambda: sum(shipped()) >= n, 60, what="every report shipped or counted")
    finally:
        go.touch()
        t.join(120)
        listener.close()
    assert done["res"].returncode == 0, done["res"].stderr
    assert shipped() == (BUFFER_REPORTS, n - BUFFER_REPORTS)
    # the first report's metric is kept exactly while nothing was dropped
    firsts = [e for m in conns for b in m if b["t"] == "batch" for e in b["reports"] if e[3].get("first") == 1]
    assert bool(firsts) == (n == BUFFER_REPORTS)
