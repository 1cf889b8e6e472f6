"""Issue 21, the worker side: what an unmodified torch loop sends once the start-up hook has put
in automatic steps (mpwatch.worker.auto), read off a real channel (a Listener standing in for the
supervisor's hub, as tests/test_worker_api.py does). Each script is tests/fixtures/auto_loop.py
in a process of its own, started the way the supervisor starts a torch script's worker: forked
by mpwatch's forkserver (tests/auto/conftest.py's `torch_forks`), with the channel's variables and
MPWATCH_AUTO_HOOKS; a script that never imports torch by exec, with the start-up hook's folder
on PYTHONPATH."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Listener
from pathlib import Path

import pytest

from mpwatch.contract import protocol
from mpwatch.supervisor.preload.forkserver import Forkserver
from mpwatch.supervisor.spawn import INJECT_DIR
from tests.auto.conftest import LOOP_ARGS
from tests.helpers import FIXTURES, ROOT, need, wait_for

need("torch", "automatic steps are torch's (pip install -e '.[demo]')")
pytestmark = pytest.mark.torch

KEY = os.urandom(16)
LOOP = FIXTURES / "auto_loop.py"


class Channel:
    """A hub stand-in: every message of every connection, by the pid its hello gave."""

    def __init__(self, tmp_path):
        self.address = str(tmp_path / "chan")
        self.listener = Listener(self.address, family="AF_UNIX", authkey=KEY)
        self.by_pid: dict[int, list[dict]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn):
        msgs: list[dict] = []
        while True:
            try:
                msg = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            if msg["t"] == "hello":
                with self.lock:
                    msgs = self.by_pid.setdefault(msg["pid"], [])
            msgs.append(msg)

    def batches(self, pid: int) -> list[dict]:
        return [m for m in self.by_pid.get(pid, []) if m["t"] == "batch"]

    def entries(self, pid: int) -> list[list]:
        """Every report entry of pid, in order: [ts, step, loss, metrics(, n)]."""
        return [e for b in self.batches(pid) for e in b["reports"]]


def run_loop(tmp_path, chan: Channel, *args, forks: Forkserver | None, timeout: float = 180,
             script: Path = LOOP) -> dict:
    """The script to its end, forked by `forks` (torch imported there once), or started by exec
    (forks None: a script that never imports torch); what it wrote to --out."""
    out = tmp_path / "out.json"
    argv = [sys.executable, str(script), "--out", str(out), *map(str, args)]
    own = {protocol.ENV_ADDRESS: chan.address, protocol.ENV_AUTHKEY: KEY.hex(), protocol.ENV_RANK: "0",
           protocol.ENV_FLUSH: "0.05", protocol.ENV_AUTO: "1"}
    if forks is None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([INJECT_DIR, str(ROOT)]), **own)
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
        code, stderr = res.returncode, res.stderr
    else:
        with open(tmp_path / "stdout", "wb") as so, open(tmp_path / "stderr", "wb") as se:
            proc = forks.spawn(argv, {**forks.env, **own}, so, se, str(tmp_path), "script")
        assert not isinstance(proc, str), proc
        try:
            wait_for(lambda: proc.poll() is not None, timeout, what="the forked loop's end")
        finally:
            if proc.returncode is None:  # it leads a session of its own: nothing of it outlives the test
                os.killpg(proc.pid, signal.SIGKILL)
        code, stderr = proc.returncode, (tmp_path / "stderr").read_text(errors="replace")
    assert code == 0, stderr
    assert "mpwatch:" not in stderr, stderr  # no "no automatic steps in this process"
    return json.loads(out.read_text())


def steps_and_losses(chan: Channel, pid: int) -> tuple[dict[int, float | None], int]:
    """{step: loss} of every entry, and the report() calls they stand for."""
    got: dict[int, float | None] = {}
    calls = 0
    for e in chan.entries(pid):
        got[e[1]] = e[2]
        calls += e[4] if len(e) == 5 else 1
    return got, calls


def test_an_unmodified_loop_sends_each_optimizer_step_its_loss_and_its_time_split(tmp_path, torch_forks):
    chan = Channel(tmp_path)
    out = run_loop(tmp_path, chan, "--steps", 30, "--loader-workers", 2, forks=torch_forks)
    assert out["hooked"]
    assert list(chan.by_pid) == [out["pid"]], "DataLoader worker processes never connect"
    got, calls = steps_and_losses(chan, out["pid"])
    assert calls == 30 and max(got) == 30 and min(got) == 1
    for step, loss in got.items():
        assert loss == out["losses"][step - 1], (step, loss)  # float32 -> float -> JSON: exact
    batches = chan.batches(out["pid"])
    assert all(b.get("auto") is True for b in batches if b["reports"])
    phases = batches[-1]["phases"]
    assert set(phases) == {"data", "forward", "backward", "optimizer"} and all(v > 0 for v in phases.values())
    # The loss is read as a number on the sender thread only, never on the training thread.
    mpwatch_dir = str(ROOT / "mpwatch")
    ours = [r for r in out["reads"] if mpwatch_dir in r]
    assert ours and all(r.startswith("mpwatch-sender ") for r in ours), out["reads"]


def test_accumulation_is_one_step_with_the_mean_loss_and_two_optimizers_step_once(tmp_path, torch_forks):
    chan = Channel(tmp_path)
    out = run_loop(tmp_path, chan, "--steps", 12, "--accum", 4, "--optimizers", 2, forks=torch_forks)
    got, calls = steps_and_losses(chan, out["pid"])
    assert calls == 12 and sorted(got)[-1] == 12
    for step, loss in got.items():
        assert loss == pytest.approx(out["losses"][step - 1], rel=1e-12), step


def test_a_loop_without_an_optimizer_counts_each_backward_once_even_with_a_checkpoint(tmp_path, torch_forks):
    chan = Channel(tmp_path)
    out = run_loop(tmp_path, chan, "--steps", 15, "--manual", "--checkpoint", forks=torch_forks)
    got, calls = steps_and_losses(chan, out["pid"])
    assert calls == 15 and max(got) == 15  # the checkpoint's backward() inside backward() is no step
    for step, loss in got.items():
        assert loss == out["losses"][step - 1]


def test_a_step_the_grad_scaler_skips_still_counts_and_the_loss_is_unscaled(tmp_path, torch_forks):
    chan = Channel(tmp_path)
    out = run_loop(tmp_path, chan, "--steps", 10, "--scaler-skip", 4, forks=torch_forks)
    got, calls = steps_and_losses(chan, out["pid"])
    assert calls == 10 and max(got) == 10
    for step, loss in got.items():
        assert loss == out["losses"][step - 1]  # not loss * 65536


def test_explicit_report_wins_and_metrics_only_reports_merge(tmp_path, torch_forks):
    chan = Channel(tmp_path)
    # --drained: the loop waits for the sender to take each step's reports, so that no flush holds
    # enough to fold them (a sender held back on a loaded machine folds a flush of more than
    # sender.batch.FOLD entries, keeping the last step: step 6's own entry would go into 1006's)
    out = run_loop(tmp_path, chan, "--steps", 12, "--report-from", 6, "--metrics", "--drained",
                   forks=torch_forks)
    entries = chan.entries(out["pid"])
    assert all(len(e) == 4 for e in entries), "nothing folded"
    steps = [e[1] for e in entries if e[1] is not None]
    # Step 6's optimizer step comes before the script's first report (of step 1006): none after it.
    assert steps == [1, 2, 3, 4, 5, 6, *range(1006, 1013)], steps
    # every metrics-only report its own entry, before the script's reports as after
    assert [e[3]["step_seen"] for e in entries if e[1] is None] == list(range(1, 13))
    for b in chan.batches(out["pid"]):  # a batch is automatic when every report of it is
        if b["reports"]:
            assert (b.get("auto") is True) == all(e[1] is None or e[1] < 1000 for e in b["reports"]), b


def test_the_current_step_is_the_automatic_one_until_report_wins(tmp_path, torch_forks):
    """The process's step (worker.api's _channel.state.step), which worker.control's
    should_checkpoint() and tunable() compare with a request's step: automatic steps set it,
    then the script's own report()."""
    chan = Channel(tmp_path)
    out = run_loop(tmp_path, chan, "--steps", 9, "--report-from", 6, forks=torch_forks)
    assert out["current"] == [1, 2, 3, 4, 5, 1006, 1007, 1008, 1009], out["current"]


def test_hogwild_children_send_their_own_steps(tmp_path, torch_forks):
    chan = Channel(tmp_path)
    out = run_loop(tmp_path, chan, "--steps", 10, "--children", 2, forks=torch_forks)
    kids = [json.loads((tmp_path / f"out.json.{i}").read_text()) for i in range(2)]
    assert sorted(out["children"]) == sorted(k["pid"] for k in kids)
    assert set(chan.by_pid) >= {k["pid"] for k in kids}
    assert not chan.entries(out["pid"]), "the parent stepped nothing: no step of its own"
    for k in kids:
        got, calls = steps_and_losses(chan, k["pid"])
        assert calls == 10 and max(got) == 10
        for step, loss in got.items():
            assert loss == sum(k["losses"][step - 1]) / len(k["losses"][step - 1])


def test_a_process_that_never_imports_torch_loads_nothing_of_mpwatch(tmp_path):
    chan = Channel(tmp_path)
    out = run_loop(tmp_path, chan, forks=None, script=FIXTURES / "never_torch.py")
    assert out["modules"] == []
    assert out["meta_path"][0] == "_TorchFinder"  # waiting for torch, a comparison per import
    assert chan.by_pid == {}


def test_the_losses_are_bit_identical_with_and_without_the_hooks(tmp_path, opted_out, torch_forks):
    """Without: the loop's own losses in tests/auto/conftest.py's opted-out runs (the same
    arguments, under a supervisor: MPWATCH_AUTO_HOOKS=0, as tests/auto/test_runs.py reads them)."""
    chan = Channel(tmp_path)
    with_hooks = run_loop(tmp_path, chan, *LOOP_ARGS, forks=torch_forks)
    assert with_hooks["hooked"]
    for how, without in opted_out.items():
        assert not without.out["hooked"], how
        assert with_hooks["losses"] == without.out["losses"], how  # exact: the same floats, step for step
