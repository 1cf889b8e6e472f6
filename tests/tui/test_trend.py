"""The TREND of a loss that does not move is flat (issue 31): a loss of 0.1 as a float mean
gives it (0.09999999999999999, 0.1, 0.10000000000000002) drew `███▁██▁███`, rounding noise
scaled to the column's full height. A real run, at 80x24 and 160x48."""
from __future__ import annotations

import pytest

from mpwatch.tui.render import bars, glyphs
from tests.helpers import FIXTURES
from tests.tui.conftest import until, worker_of

SIZES = [(80, 24), (160, 48)]


def test_rounding_noise_is_flat_and_a_real_change_is_not():
    noise = [0.1, 0.09999999999999999, 0.10000000000000002, 0.1] * 3
    assert bars.sparkline(noise, 8, "abcde") == "c" * 8
    assert bars.sparkline([2.3025851, 2.3025852, 2.302585], 3, "abc") == "bbb"  # float32's own rounding
    assert bars.sparkline([0.1, 0.1001, 0.1002], 3, "abc") == "abc"  # a change of 1 in 1000 is one
    assert bars.sparkline([0.0, 0.0], 2, "abc") == "bb"
    assert bars.sparkline([-1e-9, 1e-9], 2, "ab") == "ab"  # around zero: no size to be a share of


def _trend(app, rank: int) -> str:
    at = [c.key for c in app.table.cols].index("trend")
    return app.table.get_row(f"w{rank}")[at].plain.strip()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_constant_loss_draws_a_flat_trend(tui, size):
    async with tui(n=1, size=size, script=FIXTURES / "flat_loss.py") as (app, pilot, _run):
        def noisy():
            w = worker_of(app, 0)
            tail = w["loss_tail"] if w else []
            return len(tail) >= 10 and min(tail) != max(tail)
        await until(pilot, noisy, what="ten trend points, not all equal in floating point")
        await until(pilot, lambda: len(_trend(app, 0)) >= 8, what="the TREND cell drawn")
        trend = _trend(app, 0)
        spark = glyphs.UNICODE.spark
        assert set(trend) == {spark[(len(spark) - 1) // 2]}, trend
