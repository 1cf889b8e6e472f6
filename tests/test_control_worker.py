"""Issue 23, the worker side (worker.control) against a supervisor played by the test: requests
come down the channel, should_checkpoint() is True exactly once per request at its step (or,
learnt too late, once at once, saying so), a tunable changes at its step, and nothing of it is
loaded or running outside mpwatch."""
import json
import threading
from multiprocessing.connection import Listener

from mpwatch.contract import protocol
from tests.helpers import wait_for
from tests.test_worker_api import KEY, channel_env, run_worker

LOOP = """
    import time, mpwatch
    last = None
    for step in range({steps}):
        lr = mpwatch.tunable("lr", 0.1)
        if lr != last:
            print("LR", step, lr, flush=True)
            last = lr
        mpwatch.report(step=step)
        if mpwatch.should_checkpoint():
            print("CK", step, flush=True)
        time.sleep(0.01)
"""


class FakeSupervisor:
    """One worker connection: every frame it sends, and a way to send it ours."""

    def __init__(self, tmp_path):
        self.address = str(tmp_path / "chan")
        self.listener = Listener(self.address, family="AF_UNIX", authkey=KEY)
        self.frames: list[dict] = []
        self.conn = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        self.conn = self.listener.accept()
        while True:
            try:
                self.frames.append(json.loads(self.conn.recv_bytes()))
            except (EOFError, OSError):
                return

    def send(self, msg: dict):
        self.conn.send_bytes(json.dumps(msg).encode())

    def live(self, kind: str) -> list[list]:
        return [e for f in list(self.frames) if f["t"] == "batch" for e in f.get("live", []) if e[0] == kind]

    def answer(self, rid: int):
        return next((e for e in self.live("done") if e[1] == rid), None)

    def close(self):
        self.listener.close()


def test_requests_take_effect_once_at_their_step_and_a_late_one_says_so(tmp_path):
    sup = FakeSupervisor(tmp_path)
    env = dict(channel_env(sup.address), MPWATCH_FLUSH_S="0.05")
    result = {}
    t = threading.Thread(target=lambda: result.update(res=run_worker(LOOP.format(steps=500), env, timeout=120)))
    t.start()
    wait_for(lambda: sup.live("declare"), what="the tunable's declaration")
    assert sup.frames[0]["t"] == "hello" and sup.frames[0]["v"] == protocol.VERSION == 3
    assert sup.live("declare") == [["declare", "lr", "float", 0.1]]
    sup.send({"t": "checkpoint", "id": 1, "step": 150})
    sup.send({"t": "set", "id": 2, "name": "lr", "value": 0.5, "step": 200})
    sup.send({"t": "set", "id": 3, "name": "lr", "value": "not a float", "step": None})
    sup.send({"t": "nonsense", "id": 4})
    wait_for(lambda: sup.answer(2), timeout=60, what="the set's answer")
    sup.send({"t": "checkpoint", "id": 1, "step": 150})  # resent (a reconnect): applied once
    sup.send({"t": "checkpoint", "id": 5, "step": 10})  # already past: taken at once, late
    t.join(timeout=120)
    res = result["res"]
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split()
    cks = [int(lines[i + 1]) for i, w in enumerate(lines) if w == "CK"]
    assert cks[0] == 150 and len(cks) == 2 and cks[1] > 200, res.stdout
    # a value from step 200 is what tunable() returns for step 200 (issue 31: it was 201, one behind)
    assert "LR 200 0.5" in res.stdout and res.stdout.count("LR") == 2, res.stdout  # the wrong type is ignored
    assert sup.answer(1) == ["done", 1, 150, False]
    assert sup.answer(2) == ["done", 2, 200, False]
    assert sup.answer(3)[3] is False  # a value of the wrong type is answered, not taken
    assert sup.answer(5) == ["done", 5, cks[1], True]
    assert len(sup.live("done")) == 4 and sup.live("polls") == [["polls"]]
    sup.close()


def test_a_worker_starts_with_the_values_it_is_given_and_takes_a_request_without_steps(tmp_path):
    sup = FakeSupervisor(tmp_path)
    env = dict(channel_env(sup.address), MPWATCH_FLUSH_S="0.05",
               **{protocol.ENV_TUNABLES: json.dumps({"lr": 0.25, "tag": 3, "junk": [1]})})
    result = {}
    code = """
        import time, mpwatch
        print(mpwatch.tunable("lr", 0.1), mpwatch.tunable("tag", "a"), flush=True)
        while not mpwatch.should_checkpoint():  # no report(): its next call takes it
            time.sleep(0.01)
        print("CK", flush=True)
    """
    t = threading.Thread(target=lambda: result.update(res=run_worker(code, env, timeout=60)))
    t.start()
    wait_for(lambda: sup.live("polls"), what="the worker to say it polls")
    sup.send({"t": "checkpoint", "id": 7, "step": None})
    t.join(timeout=60)
    res = result["res"]
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0.25", "a", "CK"]  # an int is no str: the default stands
    wait_for(lambda: sup.answer(7), what="the answer")
    assert sup.answer(7) == ["done", 7, None, False]
    sup.close()


def test_a_loop_declaring_thousands_of_names_keeps_its_channel_and_its_frames_small(tmp_path):
    sup = FakeSupervisor(tmp_path)
    res = run_worker("""
        import mpwatch
        for i in range(5000):
            assert mpwatch.tunable(f"name-{i}-" + "x" * 40, i) == i
        mpwatch.report(step=1)
    """, dict(channel_env(sup.address), MPWATCH_FLUSH_S="0.05"))
    assert res.returncode == 0, res.stderr
    wait_for(lambda: sup.frames and sup.frames[-1]["t"] == "bye", what="the channel's end")
    assert len(sup.live("declare")) == 256  # what the supervisor keeps; the rest work in the worker alone
    batches = [f for f in sup.frames if f["t"] == "batch"]
    assert [r[1] for b in batches for r in b["reports"]] == [1]
    sup.close()


def test_outside_mpwatch_nothing_loads_runs_or_changes():
    res = run_worker("""
        import sys, threading, mpwatch
        assert "mpwatch.worker.control" not in sys.modules, "import mpwatch must not load mpwatch.worker.control"
        assert mpwatch.should_checkpoint() is False
        assert mpwatch.tunable("lr", 0.1) == 0.1 and mpwatch.tunable("x", [1]) == [1]
        assert threading.active_count() == 1
        print("ok")
    """, {})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_a_default_of_no_tunable_type_is_an_error_under_mpwatch(tmp_path):
    sup = FakeSupervisor(tmp_path)
    res = run_worker("""
        import mpwatch
        for bad in ([1], None):
            try:
                mpwatch.tunable("x", bad)
            except TypeError as exc:
                print("TypeError", str(exc).split(":")[0])
        try:
            mpwatch.tunable("", 1)
        except ValueError:
            print("ValueError")
    """, channel_env(sup.address))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:3] == ["TypeError mpwatch.tunable('x', ...)"] * 2 + ["ValueError"]
    sup.close()


def test_the_manual_lists_every_event_and_state():
    from mpwatch.contract import Event, State
    from tests.manual import section

    said = section("docs/after-the-fact.md", "Events and states")
    for name in [*Event, *State]:
        assert f"`{name}`" in said, f"docs/after-the-fact.md's list of events and states lacks {name}"
