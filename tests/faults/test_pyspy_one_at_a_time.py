"""py-spy records a rank once at a time, as the docs promise (issue 39, item 8): eight profiles
asked of a rank without torch start one py-spy; the seven others are refused, each said in its
profile_failed event. (Before, eight py-spy ran at once on the same process.)"""
from __future__ import annotations

import threading

import psutil
import pytest

from mpwatch.probes import pyspy
from mpwatch.sources.local import Client
from tests.helpers import FIXTURES, wait_for

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(pyspy.find() is None, reason="py-spy is not installed (pip install py-spy)")]


def recorders(pid: int) -> int:
    """py-spy processes recording `pid` now."""
    n = 0
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if "record" in cmd and "--pid" in cmd and cmd[cmd.index("--pid") + 1:][:1] == [str(pid)]:
            n += 1
    return n


def test_eight_py_spy_profiles_of_one_rank_run_one_at_a_time(headless, tmp_path):
    run = headless(FIXTURES / "no_torch.py", tmp_path / "stop", n=1)
    pid = wait_for(lambda: (run.worker(0)["step"] or 0) >= 3 and run.worker(0)["pid"], 60, what="rank 0")
    most, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            most[0] = max(most[0], recorders(pid))
            done.wait(0.05)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with Client.at(run.run_dir) as client:  # eight asks in well under py-spy's 3 s
            for _ in range(8):
                client.ask("profile", 0, steps=3)
        ends = wait_for(lambda: (lambda e: e if len(e) == 8 else None)(
            run.events("profile_written") + run.events("profile_failed")), 60, what="the eight outcomes")
    finally:
        done.set()
        watcher.join()
    assert most[0] == 1, most
    refused = [e for e in ends if e["why"] == "a py-spy profile of rank 0 is running: one at a time"]
    assert len(refused) == 7, [e["why"] for e in ends]
    (tmp_path / "stop").write_text("")
    assert run.wait_exit(60) == 0
    run.assert_gone()
