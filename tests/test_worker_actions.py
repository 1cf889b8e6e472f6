"""Issue 32, the worker side of the actions a rank runs at a step boundary (worker.actions)
against a supervisor played by the test: an action asked for step S starts at the boundary
where the process's step reaches S (report() with a step: no other call of the script's),
sees the steps after it, answers "done" then "result"; one asked too late says so; one of a
kind already running, or a runner that raises, is a failed result and the loop goes on; a
process without torch answers a torch action at once. The runner here is the test's own
(worker.actions.RUNNERS names a module), so the mechanism is checked apart from the profiler."""
import threading

from tests.helpers import wait_for
from tests.test_control_worker import FakeSupervisor
from tests.test_worker_api import channel_env, run_worker

RUNNER = '''
import sys, types
from mpwatch.contract import protocol
from mpwatch.worker import actions

runner = types.ModuleType("stand_in_runner")

class Session:
    def __init__(self, answers, rid, frame, step):
        self.answers, self.rid, self.left = answers, rid, frame["steps"]
        self.first = step
        self.next_step = step + self.left

    def at_step(self, step):
        print("END", self.rid, step, flush=True)
        self.answers.result(self.rid, {"state": "written", "steps": step - self.first, "bytes": 1})
        return True

    def at_exit(self):
        print("EXIT", self.rid, flush=True)

def begin(answers, rid, at, step, frame):
    if frame.get("boom"):
        raise RuntimeError("the runner broke")
    print("BEGIN", rid, at, step, flush=True)
    answers.answer(rid, at, step)
    return Session(answers, rid, frame, step)

runner.begin = begin
sys.modules["stand_in_runner"] = runner
actions.RUNNERS[protocol.PROFILE] = "stand_in_runner"
protocol.TORCH_ACTIONS = ()  # the stand-in needs no torch
'''

LOOP = RUNNER + '''
import os, time, mpwatch
step = 0
while step < STEPS and not os.path.exists(FLAG):
    mpwatch.report(step=step)
    step += 1
    time.sleep(0.01)
'''


def loop(steps: int, flag: object = "") -> str:
    """A loop reporting steps 0.. every 10 ms: `steps` of them, or until the file `flag` is there."""
    return LOOP.replace("STEPS", str(steps)).replace("FLAG", repr(str(flag)))


def _lines(out: str, word: str) -> list[list[int]]:
    return [[None if x == "None" else int(x) for x in ln.split()[1:]]
            for ln in out.splitlines() if ln.startswith(word + " ")]


def _run(sup: FakeSupervisor, code: str) -> tuple[threading.Thread, dict]:
    env = dict(channel_env(sup.address), MPWATCH_FLUSH_S="0.05")
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(res=run_worker(code, env, timeout=120)))
    t.start()
    return t, result


def test_an_action_starts_at_its_step_from_report_alone_and_answers_twice(tmp_path):
    sup = FakeSupervisor(tmp_path)
    t, result = _run(sup, loop(100_000, tmp_path / "stop"))
    wait_for(lambda: [f for f in sup.frames if f["t"] == "batch"], what="the first batch")
    sup.send({"t": "profile", "id": 1, "step": 150, "steps": 80})
    sup.send({"t": "profile", "id": 1, "step": 150, "steps": 80})  # resent (a reconnect): run once
    wait_for(lambda: sup.answer(1), timeout=60, what="the action's start")
    sup.send({"t": "profile", "id": 2, "step": None, "steps": 1})  # 1 still runs
    wait_for(lambda: [e for e in sup.live("result") if e[1] == 2], timeout=60, what="the refusal")
    wait_for(lambda: [e for e in sup.live("result") if e[1] == 1], timeout=60, what="the first's end")
    sup.send({"t": "profile", "id": 3, "step": 10, "steps": 2})  # long past: at once, late
    wait_for(lambda: [e for e in sup.live("result") if e[1] == 3], timeout=60, what="the late one's end")
    sup.send({"t": "profile", "id": 4, "step": None, "boom": True, "steps": 1})
    wait_for(lambda: [e for e in sup.live("result") if e[1] == 4], timeout=60, what="the broken one's result")
    (tmp_path / "stop").touch()
    t.join(timeout=120)
    res = result["res"]
    assert res.returncode == 0, res.stderr
    assert _lines(res.stdout, "BEGIN")[0] == [1, 150, 150]
    assert [1, 230] in _lines(res.stdout, "END")
    wait_for(lambda: len(sup.live("result")) >= 4, what="every result")
    results = {e[1]: e[2] for e in sup.live("result")}
    assert sup.answer(1) == ["done", 1, 150, False]
    assert results[1] == {"state": "written", "steps": 80, "bytes": 1}
    assert results[2] == {"state": "failed", "why": "request #1 runs it still"}
    begun3 = next(b for b in _lines(res.stdout, "BEGIN") if b[0] == 3)
    assert begun3[2] > 230 and sup.answer(3) == ["done", 3, begun3[2], True]
    assert results[4] == {"state": "failed", "why": "RuntimeError: the runner broke"}
    assert sup.answer(4) is None
    sup.close()


def test_an_action_running_when_the_process_exits_finishes_before_the_last_flush(tmp_path):
    sup = FakeSupervisor(tmp_path)
    t, result = _run(sup, loop(60))
    wait_for(lambda: [f for f in sup.frames if f["t"] == "batch"], what="the first batch")
    sup.send({"t": "profile", "id": 9, "step": None, "steps": 10_000})
    t.join(timeout=120)
    res = result["res"]
    assert res.returncode == 0, res.stderr
    assert "EXIT 9" in res.stdout and sup.answer(9)[:2] == ["done", 9]


def test_a_process_without_torch_answers_a_torch_action_at_once(tmp_path):
    sup = FakeSupervisor(tmp_path)
    t, result = _run(sup, f"""
        import os, time, mpwatch
        mpwatch.report(step=0)  # one step, then none: the answer needs no step boundary
        while not os.path.exists({str(tmp_path / "stop")!r}):
            time.sleep(0.05)
    """)
    wait_for(lambda: [f for f in sup.frames if f["t"] == "batch"], what="the first batch")
    sup.send({"t": "profile", "id": 5, "step": None, "steps": 3, "path": str(tmp_path / "x.json.gz")})
    got = wait_for(lambda: [e for e in sup.live("result") if e[1] == 5], timeout=30, what="the answer")
    assert got == [["result", 5, {"state": "failed", "why": "this process has not imported torch",
                                  "no_torch": True}]]
    assert not (tmp_path / "x.json.gz").exists()
    (tmp_path / "stop").touch()
    t.join(timeout=120)
    assert result["res"].returncode == 0, result["res"].stderr
    sup.close()
