"""Issue 21: what counts as an automatic step, and where its time went (mpwatch.worker.auto.steps),
as the hooks would call it, on a clock the test moves. No torch: the rules alone."""
from __future__ import annotations

from mpwatch.worker.auto.steps import Steps


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make():
    clock, sent = Clock(), []
    steps = Steps(lambda step, parts, times, pairs: sent.append((step, list(parts), times, pairs)), clock)
    return steps, clock, sent


def backward(steps: Steps, loss: object) -> None:
    steps.backward_start()
    steps.parts.append(loss)
    steps.backward_done()


def test_an_optimizer_step_after_backward_is_a_step_with_its_loss():
    steps, _, sent = make()
    steps.has_optimizer = True
    for i in range(3):
        backward(steps, f"l{i}")
        steps.optimizer_stepped()
    assert [(s, p) for s, p, _, _ in sent] == [(1, ["l0"]), (2, ["l1"]), (3, ["l2"])]


def test_optimizers_stepped_after_one_backward_count_once():
    steps, _, sent = make()
    steps.has_optimizer = True
    backward(steps, "l")
    steps.optimizer_stepped()
    steps.optimizer_stepped()  # the decoder's optimizer, same iteration
    steps.scaler_stepped()  # and the scaler's step returning: the optimizer counted it already
    assert [s for s, *_ in sent] == [1]


def test_accumulated_backwards_are_one_step_holding_every_loss():
    steps, _, sent = make()
    steps.has_optimizer = True
    for i in range(4):
        backward(steps, i)
    steps.optimizer_stepped()
    assert [(s, p) for s, p, _, _ in sent] == [(1, [0, 1, 2, 3])]


def test_a_step_the_scaler_skipped_counts_when_its_step_returns():
    steps, _, sent = make()
    steps.has_optimizer = True
    backward(steps, "l")
    steps.scaler_stepped()  # no optimizer step ran: inf gradients
    assert [s for s, *_ in sent] == [1]


def test_without_an_optimizer_each_backward_is_a_step():
    steps, _, sent = make()
    backward(steps, "a")
    backward(steps, "b")
    assert [(s, p) for s, p, _, _ in sent] == [(1, ["a"]), (2, ["b"])]


def test_without_any_backward_each_optimizer_step_counts():
    steps, _, sent = make()
    steps.has_optimizer = True
    steps.optimizer_stepped()
    steps.optimizer_stepped()
    assert [(s, p) for s, p, _, _ in sent] == [(1, []), (2, [])]


def test_time_in_data_is_data_and_the_rest_forward_backward_and_optimizer():
    steps, clock, sent = make()
    steps.has_optimizer = True
    clock.t += 5.0  # imports, set-up: no step's time
    for data, fwd, bwd, opt, after in ((0.3, 0.2, 0.4, 0.1, 0.05), (0.1, 0.15, 0.3, 0.02, 0.5)):
        steps.batch_start()
        clock.t += data
        steps.data(data)
        clock.t += fwd
        steps.backward_start()
        clock.t += bwd
        steps.parts.append("l")
        steps.backward_done()
        clock.t += opt
        steps.optimizer_stepped()
        clock.t += after  # logging, a checkpoint: in no phase
    assert [{k: round(v, 6) for k, v in t.items()} for _, _, t, _ in sent] == [
        {"data": 0.3, "forward": 0.2, "backward": 0.4, "optimizer": 0.1},
        {"data": 0.1, "forward": 0.15, "backward": 0.3, "optimizer": 0.02}]


def test_a_forked_child_counts_from_one():
    steps, _, sent = make()
    steps.has_optimizer = True
    backward(steps, "l")
    steps.optimizer_stepped()
    steps.parts.append("half a step")
    steps.reset()
    backward(steps, "c")
    steps.optimizer_stepped()
    assert [(s, p) for s, p, _, _ in sent] == [(1, ["l"]), (1, ["c"])]


def test_between_steps_a_batch_is_a_heartbeat_at_most_once_a_second_and_never_before_the_first_step():
    steps, clock, sent = make()
    steps.has_optimizer = True
    steps.data(0.1)  # before the first step: start-up, not progress
    assert sent == []
    backward(steps, "l")
    steps.optimizer_stepped()
    for _ in range(12):  # an evaluation loop: a batch every 0.25 s for 3 s
        clock.t += 0.25
        steps.data(0.01)
    beats = [s for s in sent if s[0] is None]
    assert len(beats) == 3 and all(s == (None, [], {}, []) for s in beats)
    backward(steps, "m")
    steps.optimizer_stepped()
    assert sent[-1][0] == 2  # the next step is step 2: heartbeats count no step


def test_a_step_that_returns_a_loss_has_that_loss_and_one_that_returns_none_the_mean():
    """Issue 31, item 5: optimizer.step(closure) (LBFGS evaluates the closure up to 20 times) is
    one step whose loss is what step() returned, not the mean of its closure's backward() calls;
    torch's hook fires inside step(), so the count waits for step() to return. Fails on the code
    before (no step_returned: the step was counted in the hook with the mean)."""
    steps, _, sent = make()
    steps.has_optimizer = True
    steps.stepping += 1  # step(closure) begins
    for loss in ("first", "second", "third"):
        backward(steps, loss)
    steps.optimizer_stepped()  # torch's post hook, inside step()
    assert sent == []
    steps.stepping -= 1
    steps.step_returned(["returned"])
    assert [(s, p) for s, p, _, _ in sent] == [(1, ["returned"])]
    steps.stepping += 1  # a step() that returns None: its backward() losses stand
    backward(steps, "a")
    backward(steps, "b")
    steps.optimizer_stepped()
    steps.stepping -= 1
    steps.step_returned(None)
    assert [(s, p) for s, p, _, _ in sent][1:] == [(2, ["a", "b"])]
    steps.step_returned(["no step was taken"])  # a step() whose hook never fired: nothing counted
    assert len(sent) == 2
