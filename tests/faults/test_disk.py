"""The run directory's file system fills up: a clear alert, and the run goes on (issue 8)."""
import shutil

import pytest

from mpwatch.sources.local import Client
from tests.faults.conftest import FAULTS
from tests.helpers import mount_tmpfs, umount, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.mark.slow
def test_full_disk_raises_an_alert_and_the_run_goes_on(headless, tmp_path):
    disk = tmp_path / "disk"
    why = mount_tmpfs(disk)
    if why:
        pytest.skip(why)
    run = headless(FAULTS / "diskfill.py", str(disk), n=2, start=False)
    run.run_dir = disk / "run"
    try:
        run.start()
        st = wait_for(lambda: (lambda s: s if any(a["kind"] == "disk" for a in s["alerts"]) else None)(run.status()),
                      what="a disk alert")
        alert = next(a for a in st["alerts"] if a["kind"] == "disk")
        assert "No space left on device" in alert["message"] and str(run.run_dir) in alert["message"]
        assert "the run goes on" in alert["message"]
        assert "alert: cannot write the run directory" in run.stderr_text
        assert shutil.disk_usage(disk).free < 64 * 1024
        # the run goes on: every rank keeps reporting
        steps = {w["rank"]: w["step"] or 0 for w in st["workers"]}
        wait_for(lambda: (lambda s: all(w["state"] == "running" and (w["step"] or 0) >= steps[w["rank"]] + 20
                                        for w in s["workers"]))(run.status()), what="20 more steps on each rank")
        # restarting a rank needs the (full) run directory too: the supervisor must survive it
        pid1 = run.worker(1)["pid"]
        run.ctl("restart", "1")
        wait_for(lambda: (lambda w: w["restarts"] == 1 and w["pid"] != pid1 and w["state"] == "running"
                          and (w["step"] or 0) >= 5)(run.worker(1)), what="rank 1 back after its restart")
        assert run.proc.poll() is None
        # one alert for the whole time the disk was full (every write failed since: none said twice)
        assert [a["kind"] for a in run.status()["alerts"]].count("disk") == 1
        with Client.at(run.run_dir) as c:  # the events clients got (events.jsonl is on that disk)
            said = [e for e in c.events(0)["events"] if e["event"] == "alert" and e.get("kind") == "disk"]
        assert len(said) == 1, said
        assert run.stderr_text.count("alert: cannot write the run directory") == 1, run.stderr_text
        run.ctl("stop")
        assert run.wait_exit(timeout=60) == 1
        run.assert_gone()
    finally:
        run.cleanup()
        umount(disk)
