"""Issue 32, a profile of any rank on demand, against real runs: `ctl profile 0` on an unmodified
torch loop (tests/fixtures/auto_loop.py: no line of mpwatch) leaves a gzipped Chrome trace of its
aten operators in rank-0/profiles/ and the loop goes on; `ctl profile all` starts every rank at
one step (each answer and each trace says it); the same seeded run has the same losses with and
without a profile; a rank without torch gets py-spy's flame graph, or one line saying why not;
bad input is one line and exit code 2."""
from __future__ import annotations

import gzip
import json
import os
import stat
import threading

from tests.helpers import FIXTURES, HeadlessRun, one_line_error, wait_for

LOOP = FIXTURES / "auto_loop.py"


def _stepping(run, n: int, past: int = 3) -> None:
    """n ranks past step `past`, at a known pace: the step a request starts at is picked from it
    (unknown, the next one, which a loaded machine's delivery misses)."""
    wait_for(lambda: len(run.status()["workers"]) == n and all((w["step"] or 0) >= past and w["steps_per_s"]
                                                              for w in run.status()["workers"]),
             timeout=120, what=f"{n} rank(s) stepping at a known pace")


def _trace(run, rel: str) -> dict:
    path = run.run_dir / rel
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_ctl_profile_0_on_an_unmodified_torch_loop_leaves_its_aten_operators_and_the_loop_goes_on(
        headless, tmp_path):
    run = headless(LOOP, "--steps", "250", "--sleep", "0.05", "--out", str(tmp_path / "out.json"), n=1)
    _stepping(run, 1)
    said = run.ctl("profile", "0", "--steps", "3").stdout
    assert said.startswith("profile of its next 3 steps asked of rank 0; traces go to rank-0/profiles/"), said
    written = run.wait_event("profile_written", timeout=60)[0]
    started = run.wait_event("profile_started")[0]
    assert started["rank"] == 0 and started["tool"] == "torch.profiler" and not started["late"]
    trace = _trace(run, written["path"])
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"aten::addmm", "aten::mse_loss"} <= names, sorted(n for n in names if n)[:40]
    assert trace["mpwatch"] == {"rank": 0, "request": 1, "after_step": started["step"],
                                "first_step": started["step"] + 1, "steps": 3}
    assert written["steps"] == 3 and written["bytes"] == os.path.getsize(run.run_dir / written["path"])
    assert any(t[0].startswith("aten::") for t in written["top"]) and written["held_ms"] >= 0
    wait_for(lambda: (run.worker(0)["step"] or 0) >= started["step"] + 20, timeout=60,
             what="the loop going on")
    result = run.status()["profiles"][0]["results"][0]
    assert result["state"] == "written" and result["path"] == written["path"]
    assert result["top"][0]["calls"] > 0
    assert "profile #1 of rank 0, its next 3 steps, asked by ctl" in run.ctl("status").stdout
    assert run.wait_exit(120) == 0  # every step of the loop ran, and it ended as it does


def test_ctl_profile_all_starts_every_rank_at_one_step(headless, tmp_path):
    run = headless(LOOP, "--steps", "250", "--sleep", "0.05", "--out", str(tmp_path / "out-{rank}.json"),
                   n=2)
    _stepping(run, 2)
    said = run.ctl("profile", "all", "--steps", "2").stdout
    asked = run.wait_event("profile_requested")[0]
    s = asked["step"]
    assert s is not None and said.startswith(f"profile of steps {s + 1}-{s + 2} asked of ranks 0-1 "
                                             f"(it starts once step {s} is reported)"), said
    written = run.wait_event("profile_written", timeout=60, count=2)
    started = run.events("profile_started")
    assert sorted((e["rank"], e["step"], e["late"]) for e in started) == [(0, s, False), (1, s, False)]
    for e in written:
        assert e["path"].startswith(f"rank-{e['rank']}/")
        assert _trace(run, e["path"])["mpwatch"]["after_step"] == s


def _losses(tmp_path, name: str, profile: bool) -> list[float]:
    (tmp_path / name).mkdir()
    run = HeadlessRun(tmp_path / name, LOOP, "--steps", "120", "--sleep", "0.03", "--out",
                      str(tmp_path / f"{name}.json"), n=1)
    try:
        run.start()
        if profile:
            _stepping(run, 1)
            run.ctl("profile", "0", "--steps", "5")
            run.wait_event("profile_written", timeout=60)
        run.wait_exit(180)
    finally:
        run.cleanup()
    return json.loads((tmp_path / f"{name}.json").read_text())["losses"]


def test_a_profile_never_changes_the_losses(tmp_path):
    got: dict[str, list[float]] = {}
    other = threading.Thread(target=lambda: got.update(plain=_losses(tmp_path, "plain", False)))
    other.start()
    got["profiled"] = _losses(tmp_path, "profiled", True)
    other.join(timeout=240)
    assert len(got["profiled"]) == 120 and got["profiled"] == got["plain"]


def test_a_rank_without_torch_gets_py_spys_flame_graph_or_says_why_not(headless, tmp_path):
    run = headless(FIXTURES / "no_torch.py", tmp_path / "stop", n=2)
    wait_for(lambda: (run.worker(0)["step"] or 0) >= 3 and run.worker(1)["pid"], timeout=60,
             what="the ranks")
    said = run.ctl("profile", "all", "--steps", "2").stdout
    assert "rank 1: py-spy instead (no channel)" in said, said
    done = run.wait_event("profile_written", timeout=60, count=2) if _pyspy_works(run) else None
    if done is not None:
        for e in done:
            assert e["tool"] == "py-spy" and e["path"].endswith(".svg") and e["why"] == "2 s sampled"
            path = run.run_dir / e["path"]
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600 and b"<svg" in path.read_bytes()[:512]
    else:
        failed = run.wait_event("profile_failed", timeout=60, count=2)
        assert all(e["why"].startswith(("py-spy", "rank ")) for e in failed), failed
    assert {e["tool"] for e in run.events("profile_started")} == {"py-spy"}


def _pyspy_works(run) -> bool:
    """Whether py-spy could record here (a container may forbid reading another process)."""
    got = wait_for(lambda: run.events("profile_written") + run.events("profile_failed"), timeout=60,
                   what="py-spy's first outcome")
    return got[0]["event"] == "profile_written"


def test_without_py_spy_a_rank_without_torch_is_refused_in_one_line_and_bad_input_is_one_line(
        headless, tmp_path):
    run = headless(FIXTURES / "no_torch.py", tmp_path / "stop", n=2,
                   env=dict(os.environ, MPWATCH_PYSPY="off"))
    wait_for(lambda: (run.worker(0)["step"] or 0) >= 3 and run.worker(1)["pid"], timeout=60,
             what="the ranks")
    run.ctl("profile", "all")
    failed = {e["rank"]: e["why"] for e in run.wait_event("profile_failed", timeout=60, count=2)}
    off = "and py-spy is off (MPWATCH_PYSPY=off): no profile"
    assert failed == {0: f"rank 0 has not imported torch, {off}",
                      1: f"rank 1 has no channel to mpwatch, {off}"}
    assert not list((run.run_dir / "rank-0" / "profiles").iterdir())
    one_line_error(run.ctl("profile", "7", check=False), "no rank 7 in this run (ranks: 0-1)")
    one_line_error(run.ctl("profile", "0", "--steps", "0", check=False), "--steps: must be at least 1, got 0")
    one_line_error(run.ctl("profile", "0", "--steps", "51", check=False), "--steps: at most 50 steps")
    one_line_error(run.ctl("profile", "x", check=False), "expected a rank number or 'all'")
    one_line_error(run.ctl("profile", "0", "--steps", "1e9", check=False), "--steps")
    assert len(run.events("profile_requested")) == 1
