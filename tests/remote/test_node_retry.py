"""docs/remote.md: a node that cannot be reached is tried again after 1, 2, 4, 8, then every 15 s
(sources.multinode's NodePoller, its pauses recorded instead of waited: its stop event is the
test's). The first try after the loss is at once."""

from __future__ import annotations

from mpwatch.sources.local import ClientError
from mpwatch.sources.multinode.source import NodePoller
from tests.documented import NODE_RETRY_S


class Pauses:
    """Stands for the poller's stop event: each wait is a pause between two tries, never waited."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.seen.append(timeout)
        return False

    def is_set(self) -> bool:
        return False


def test_a_lost_node_is_tried_again_after_the_documented_pauses():
    tries: list[int] = []

    def connect():
        tries.append(1)
        raise ClientError("ssh: connect to host node-b port 22: Connection refused")

    node = NodePoller("node-b", "RUN", connect)
    node._stop = Pauses()  # type: ignore[assignment]
    for _ in range(len(NODE_RETRY_S) + 3):
        assert node._reconnect() is False
    assert len(tries) == len(NODE_RETRY_S) + 3
    assert node._stop.seen == [0.0, *NODE_RETRY_S, NODE_RETRY_S[-1], NODE_RETRY_S[-1]]
    assert node.error == "ssh: connect to host node-b port 22: Connection refused"
