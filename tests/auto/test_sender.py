"""Issue 21: a step's loss is read by the sender, once it is there (mpwatch.worker.auto.loss.StepLoss,
worker.sender's flush). The GPU side is stood in for: an event whose query() the test
answers, and a host ring the test fills; the channel is real (a Listener)."""
from __future__ import annotations

import json
import os
import threading
from multiprocessing.connection import Listener

from mpwatch.worker import batch
from mpwatch.worker.auto import loss as auto_loss
from mpwatch.worker.auto.loss import StepLoss
from mpwatch.worker.channel import Channel, ChannelConfig
from mpwatch.worker.sender import Sender
from tests.helpers import wait_for

KEY = os.urandom(16)


class Event:
    """A CUDA event stand-in: done when the test says so."""

    def __init__(self):
        self.done = False

    def query(self) -> bool:
        return self.done


class Ring:
    """The pinned host ring stand-in: slot -> the value the device copied there."""

    def __init__(self, values: dict[int, float]):
        self.values = values

    def read(self, i: int) -> float:
        return self.values[i]


class Cpu:
    """A detached CPU scalar: float() is all the sender asks of it."""

    def __init__(self, v: float):
        self.v = v

    def __float__(self) -> float:
        return self.v


def test_a_cuda_loss_is_ready_once_its_events_completed_and_reads_the_mean():
    ev1, ev2 = Event(), Event()
    loss = StepLoss([(0, ev1), Cpu(3.0), (1, ev2)], Ring({0: 1.0, 1: 2.0}))  # type: ignore[arg-type]
    assert not loss.ready()
    ev1.done = True
    assert not loss.ready()
    ev2.done = True
    assert loss.ready() and float(loss) == 2.0


def test_a_loss_that_never_comes_lets_its_step_go_without_it(monkeypatch):
    ev = Event()
    loss = StepLoss([(0, ev)], Ring({}))  # type: ignore[arg-type]
    monkeypatch.setattr(auto_loss, "READY_WAIT_S", 0.0)
    assert loss.ready()
    assert batch.as_number(loss) is None  # the step goes, its loss unknown


def test_the_sender_holds_back_a_step_whose_loss_is_not_there_and_what_follows(tmp_path):
    address = str(tmp_path / "chan")
    listener = Listener(address, family="AF_UNIX", authkey=KEY)
    got: list[dict] = []

    def read():
        conn = listener.accept()
        while True:
            try:
                got.append(json.loads(conn.recv_bytes()))
            except (EOFError, OSError):
                return

    threading.Thread(target=read, daemon=True).start()
    chan = Channel(ChannelConfig(address, KEY, 0))
    sender = Sender(chan)
    ev = Event()
    chan.state.auto = True
    chan.state.buf.extend([(0, 1.0, 1, Cpu(0.5), {}), (1, 1.1, 2, StepLoss([(7, ev)], Ring({7: 0.25})), {}),
                     (2, 1.2, 3, Cpu(0.125), {})])  # type: ignore[arg-type]
    sender.flush()
    wait_for(lambda: any(m["t"] == "batch" for m in got), what="the first batch")
    first = [m for m in got if m["t"] == "batch"]
    assert [r[1:3] for r in first[0]["reports"]] == [[1, 0.5]] and first[0]["auto"] is True
    ev.done = True
    sender.flush()
    wait_for(lambda: len([m for m in got if m["t"] == "batch"]) == 2, what="the second batch")
    second = [m for m in got if m["t"] == "batch"][1]
    assert [r[1:3] for r in second["reports"]] == [[2, 0.25], [3, 0.125]] and second["dropped"] == 0
    chan.state.conn.close()  # type: ignore[union-attr]
    listener.close()
