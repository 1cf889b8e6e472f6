"""Issue 32: an automatic step split into forward, backward and optimizer (worker.auto.split) as
the hooks would call it, on a clock the test moves; and, for CUDA work, the same boundaries as
events whose GPU times the sender reads once they completed (worker.auto.gpu_times, and the
StepLoss that carries them), on a scripted CUDA event (CI has no GPU: only torch's CUDA view is
stood in for). No torch."""
from __future__ import annotations

import pytest

from mpwatch.worker.auto.gpu_times import GpuTimes
from mpwatch.worker.auto.loss import StepLoss
from mpwatch.worker.auto.steps import Steps


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Device:
    """A CUDA stream as events see it: an event recorded now completes once the device's clock
    passes the time its queued work ends (`busy_until`, set by the test)."""

    def __init__(self):
        self.now = 0.0  # the device's clock
        self.busy_until = 0.0  # where its queued work ends
        self.made = 0


class Event:
    """torch.cuda.Event's part the product uses: record(), query(), elapsed_time() in ms."""

    def __init__(self, device: Device, enable_timing: bool = False):
        assert enable_timing, "elapsed_time needs events made with timing"
        self.device = device
        self.at: float | None = None
        device.made += 1

    def record(self) -> None:
        self.at = self.device.busy_until

    def query(self) -> bool:
        return self.at is not None and self.device.now >= self.at

    def elapsed_time(self, end: Event) -> float:
        assert self.query() and end.query(), "read before the events completed: a sync"
        return (end.at - self.at) * 1000.0


class Torch:
    """The module as GpuTimes reads it: torch.cuda.Event."""

    def __init__(self, device: Device):
        cuda = type("cuda", (), {})()
        cuda.Event = lambda enable_timing=False: Event(device, enable_timing)
        self.cuda = cuda


def make():
    clock, sent = Clock(), []
    steps = Steps(lambda step, parts, times, pairs: sent.append((step, times, pairs)), clock)
    steps.has_optimizer = True
    return steps, clock, sent


def step(steps: Steps, clock: Clock, data=0.0, fwd=0.0, bwd=0.0, opt=0.0, after=0.0, batch=True) -> None:
    if batch:
        steps.batch_start()
        clock.t += data
        steps.data(data)
    clock.t += fwd
    steps.backward_start()
    clock.t += bwd
    steps.backward_done()
    clock.t += opt
    steps.optimizer_stepped()
    clock.t += after


def rounded(times: dict) -> dict:
    return {k: round(v, 6) for k, v in times.items()}


def test_a_loop_without_a_dataloader_counts_its_forward_from_the_last_optimizer_step():
    steps, clock, sent = make()
    step(steps, clock, fwd=0.5, bwd=0.2, opt=0.1, batch=False)  # the first: no boundary before it
    step(steps, clock, fwd=0.3, bwd=0.2, opt=0.1, batch=False)
    assert rounded(sent[1][1]) == {"data": 0.0, "forward": 0.3, "backward": 0.2, "optimizer": 0.1}


def test_an_evaluation_between_steps_is_in_no_phase():
    steps, clock, sent = make()
    step(steps, clock, data=0.1, fwd=0.2, bwd=0.3, opt=0.1)
    for _ in range(5):  # evaluation batches: a forward each, no backward()
        steps.batch_start()
        clock.t += 0.05
        steps.data(0.05)
        clock.t += 0.4
    step(steps, clock, data=0.1, fwd=0.2, bwd=0.3, opt=0.1)
    times = rounded(sent[-1][1])
    assert times == {"data": 0.35, "forward": 0.2, "backward": 0.3, "optimizer": 0.1}  # its batches are data


def test_gradient_accumulation_adds_each_micro_batch_to_its_step():
    steps, clock, sent = make()
    for _ in range(3):
        steps.batch_start()
        clock.t += 0.1
        steps.data(0.1)
        clock.t += 0.2
        steps.backward_start()
        clock.t += 0.3
        steps.backward_done()
        clock.t += 0.01  # until the next batch: no phase; after the last backward(), the optimizer's
    clock.t += 0.05
    steps.optimizer_stepped()
    assert rounded(sent[0][1]) == {"data": 0.3, "forward": 0.6, "backward": 0.9, "optimizer": 0.06}


def test_a_second_optimizer_after_the_count_is_optimizer_time_of_the_next_step():
    steps, clock, sent = make()
    step(steps, clock, data=0.1, fwd=0.2, bwd=0.3, opt=0.1)
    clock.t += 0.07
    steps.optimizer_stepped()  # the decoder's optimizer: no new step
    step(steps, clock, data=0.1, fwd=0.2, bwd=0.3, opt=0.1)
    assert [s for s, *_ in sent] == [1, 2]
    assert rounded(sent[1][1])["optimizer"] == pytest.approx(0.17)


# ---------------------------------------------------------------------- on CUDA ----
def cuda_steps():
    device = Device()
    steps, clock, sent = make()
    steps.split.gpu = GpuTimes(Torch(device))
    return steps, clock, sent, device


def queued(device: Device, seconds: float) -> None:
    """The training thread queued `seconds` of kernels (they end that long after the last)."""
    device.busy_until += seconds


def test_cuda_boundaries_give_the_devices_times_read_only_once_they_completed():
    steps, clock, sent, device = cuda_steps()
    steps.batch_start()
    steps.data(0.0)
    queued(device, 0.2)  # the forward's kernels: launched in no time
    steps.backward_start()
    queued(device, 0.5)
    steps.backward_done()
    queued(device, 0.05)
    steps.optimizer_stepped()
    (_, times, pairs), = sent
    assert [p for p, _, _ in pairs] == ["forward", "backward", "optimizer"]
    loss = StepLoss([], None, steps.split.gpu, pairs)
    assert not loss.ready()  # the device is still at 0: nothing read, nothing waited for
    device.now = 0.75
    assert loss.ready()
    got = loss.gpu_phases()
    assert {k: round(v, 6) for k, v in got.items()} == {"forward": 0.2, "backward": 0.5, "optimizer": 0.05}
    assert loss.gpu_phases() is None  # read once


def test_events_are_reused_but_never_the_one_the_next_step_begins_with():
    steps, clock, sent, device = cuda_steps()
    for i in range(3):
        step(steps, clock, batch=False)
        queued(device, 0.1)
    device.now = 10.0
    gpu = steps.split.gpu
    for _, _, pairs in sent:
        gpu.read(pairs)
    last = sent[-1][2][-1][2]
    assert all(e is not last for e in gpu.pool)
    made = device.made
    step(steps, clock, batch=False)
    assert device.made == made, "the pool's events were recorded again"
    assert sent[-1][2][0][1] is last  # the next step's forward begins at the last step's end
