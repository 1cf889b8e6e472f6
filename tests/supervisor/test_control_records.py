"""Issue 31, item 2: a value set for a later step is a change pending, not the value now
(supervisor.live.records, the rule alone: no processes). The value in force moves only when
every rank asked took the change; a rank started again before the step starts with the value in
force and is sent the pending change at its step; the changes kept never drop a pending one
while one in force can go. Each fails on the code before (the value was the last change's)."""
from __future__ import annotations

from mpwatch.contract import RankAnswer
from mpwatch.supervisor.live.records import CHANGES_KEPT, Change, Registry


def _book() -> tuple[Registry, object]:
    book = Registry()
    t = book.declare(0, "lr", "float", 0.1)
    book.declare(1, "lr", "float", 0.1)
    assert t is not None
    return book, t


def _set(book: Registry, t, value: float, step: int | None, asked: set[int]) -> Change:
    c = Change(book.next_id(), "ctl", step, set(asked), value=value, old=t.value)
    book.set(t, c)
    return c


def _took(book: Registry, c: Change, rank: int, step: int) -> None:
    c.answers[rank] = RankAnswer(rank=rank, step=step, late=False)
    book.settle()


def test_a_change_for_a_later_step_is_pending_until_every_rank_asked_took_it():
    book, t = _book()
    c = _set(book, t, 0.03, 999999, {0, 1})
    st = t.status()
    assert st["value"] == 0.1 and st["changes"][-1]["pending"] is True and st["changes"][-1]["value"] == 0.03
    assert book.values() == {}  # a rank started now starts with 0.1
    _took(book, c, 0, 999999)
    assert t.value == 0.1 and c.pending  # one of two
    _took(book, c, 1, 999999)
    assert t.value == 0.03 and not c.pending and book.values() == {"lr": 0.03}


def test_a_change_at_the_next_call_or_with_no_rank_to_ask_is_in_force_at_once():
    book, t = _book()
    _set(book, t, 0.5, None, {0, 1})
    assert t.value == 0.5 and book.values() == {"lr": 0.5}
    _set(book, t, 0.7, 50, set())  # no rank runs: the next ones start with it
    assert t.value == 0.7


def test_a_rank_started_again_before_the_step_starts_with_the_value_in_force_and_is_sent_the_change():
    book, t = _book()
    c = _set(book, t, 0.03, 500, {0, 1})
    covered = book.epoch
    for rank in (0, 1):  # `ctl restart all` before step 500: both processes end unanswered
        c.asked.discard(rank)
    book.settle()
    assert c.pending and t.value == 0.1  # nobody took it: still pending, not in force
    book.forget(0)
    assert book.values() == {} and book.owed(t, 0, covered) == [c]  # at step 500, on its channel
    c.asked.add(0)
    _took(book, c, 0, 500)
    assert t.value == 0.03 and not c.pending


def test_a_rank_that_took_a_pending_change_and_starts_again_takes_it_again():
    book, t = _book()
    c = _set(book, t, 0.03, 500, {0, 1})
    c.answers[0] = RankAnswer(rank=0, step=500, late=False)  # rank 0 got there, rank 1 not yet
    book.forget(0)  # rank 0 restarted: its new process starts before 500 again
    assert 0 not in c.answers and book.owed(t, 0, book.epoch) == [c]


def test_a_value_that_came_into_force_after_a_rank_started_is_sent_to_it_at_once():
    book, t = _book()
    covered = book.epoch  # the rank's environment
    c = _set(book, t, 0.2, None, {1})
    assert book.owed(t, 0, covered) == [c]
    assert book.owed(t, 0, book.epoch) == []  # a rank started after it has it in its environment


def test_the_changes_kept_drop_one_in_force_before_a_pending_one():
    book, t = _book()
    far = _set(book, t, 0.03, 999999, {0, 1})
    for i in range(CHANGES_KEPT + 3):
        _set(book, t, float(i), None, {0, 1})
    assert len(t.changes) == CHANGES_KEPT and far in t.changes
