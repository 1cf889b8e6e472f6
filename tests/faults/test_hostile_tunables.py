"""Tunables declared badly or in bulk (issue 30, items 3 and 8), on real runs:

- a tunable whose default is not finite (inf, -inf, nan) is refused where it is declared: one
  warning on the rank's stderr, one line in the status (`ctl status`, and `refused_tunables` in
  its JSON), and the tunables declared beside it are kept (`ctl set lr` reaches the script);
- past 256 tunables (the run keeps as many), the rank says so once on its stderr naming the
  first name left out, and `ctl set` of such a name says the cap in one line of bounded length
  (it used to list 256 names)."""
from __future__ import annotations

import pytest

from tests.helpers import one_line_error, wait_for

pytestmark = pytest.mark.timeout(180)

NON_FINITE = """
import time
import mpwatch
step = 0
while True:
    odd = (mpwatch.tunable("x", float("inf")), mpwatch.tunable("y", float("nan")),
           mpwatch.tunable("z", -float("inf")))
    lr = mpwatch.tunable("lr", 0.1)
    if step % 20 == 0 or lr != 0.1:
        print(f"STEP {step} lr={lr!r} odd={odd!r}", flush=True)
    mpwatch.report(step=step, loss=1.0)
    time.sleep(0.05)
    step += 1
"""

MANY = """
import time
import mpwatch
step = 0
while True:
    values = [mpwatch.tunable(f"t{i}", i) for i in range(300)]
    mpwatch.report(step=step, loss=1.0)
    time.sleep(0.05)
    step += 1
"""


def test_a_non_finite_default_is_refused_alone(headless, tmp_path):
    script = tmp_path / "odd.py"
    script.write_text(NON_FINITE)
    run = headless(script, n=2)
    run.wait_event("tunable_declared", lambda e: e.get("tunable") == "lr", count=1, timeout=60)
    st = wait_for(lambda: (lambda s: s if all(w.get("refused_tunables") for w in s["workers"]) else None)(
        run.status()), 60, what="the refusals in the status")
    assert [t["name"] for t in st["tunables"]] == ["lr"]
    for w in st["workers"]:
        assert len(w["refused_tunables"]) == 3, w["refused_tunables"]
        assert any(r.startswith("x: ") and "finite" in r for r in w["refused_tunables"]), w["refused_tunables"]
    text = run.ctl("status").stdout
    assert sum("tunable x refused" in ln for ln in text.splitlines()) == 2, text  # one line per rank
    said = run.ctl("set", "lr", "0.01").stdout
    assert said.startswith("lr = 0.01 from step ") and "on ranks 0-1 (now 0.1)" in said, said
    wait_for(lambda: all("lr=0.01" in run.log(r) for r in (0, 1)), 60, what="the new lr in both scripts")
    for r in (0, 1):
        err = run.log(r, "stderr").splitlines()
        warned = [ln for ln in err if ln.startswith("mpwatch: ") and "tunable" in ln]
        assert len(warned) == 3 and all("must be finite" in ln for ln in warned), err
    one_line_error(run.ctl("set", "x", "1", check=False), "no worker declared a tunable 'x'; declared: lr")


def test_past_256_tunables_the_cap_is_said_where_it_bites(headless, tmp_path):
    script = tmp_path / "many.py"
    script.write_text(MANY)
    run = headless(script, n=1)
    run.wait_event("tunable_declared", lambda e: e.get("tunable") == "t255", count=1, timeout=60)
    wait_for(lambda: "t256" in run.log(0, "stderr"), 60, what="the rank's word on the cap")
    err = [ln for ln in run.log(0, "stderr").splitlines() if ln.startswith("mpwatch: ")]
    assert len(err) == 1 and "256" in err[0] and "'t256'" in err[0], err
    assert len(run.status()["tunables"]) == 256
    res = run.ctl("set", "t299", "1", check=False)
    one_line_error(res, "no worker declared a tunable 't299'")
    assert "256" in res.stderr and len(res.stderr) < 600, res.stderr
    assert run.ctl("set", "t255", "7").stdout.startswith("t255 = 7 from step ")
