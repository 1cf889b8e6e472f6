"""`mpwatch summary` and `mpwatch ls --all` on runs that really ended: a crash with
restarts, a hang with a culprit, an OOM on a scripted GPU, a SIGKILLed supervisor."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mpwatch.rundir import reader
from tests.cli.conftest import GiB, summary, summary_text
from tests.helpers import FIXTURES, mpwatch, one_line_error

pytestmark = pytest.mark.timeout(400)
DATA = Path(__file__).resolve().parent / "data"


def row(text: str, rank: int) -> list[str]:
    """The cells of a rank's row in the summary's table."""
    return next(ln.split() for ln in text.splitlines() if ln.split()[:1] == [str(rank)])


def test_a_crash_with_restarts(crashed):
    s = summary(crashed.dir)
    assert s["listing"]["ending"] == "finished" and s["listing"]["exit_code"] == 1
    f = s["listing"]["first_failure"]
    assert f["rank"] in (0, 1) and f["error"] == "ZeroDivisionError: division by zero"
    assert f["cause"] == "exit 1: ZeroDivisionError: division by zero"
    assert s["restarts"] == 2 and [(r["rank"], r["restarts"], r["state"]) for r in s["ranks"]] == \
        [(0, 1, "failed"), (1, 1, "failed")]
    text = summary_text(crashed.dir)
    assert "ended: exit code 1: rank" in text and "ZeroDivisionError: division by zero" in text
    assert f"first failure: rank {f['rank']} at +" in text and "restarts 2" in text
    assert row(text, 0)[:2] == ["0", "failed"] and row(text, 1)[:2] == ["1", "failed"]
    assert f"files in {crashed.dir}:" in text and "notes:" not in text


def test_a_hang_names_the_culprit_its_frame_and_the_waiting_collective(stored_hang):
    """The stored hang recording (the same files every run: a busy box cannot make a dump late)."""
    hung = stored_hang
    s = summary(hung.dir)
    assert s["stopped"] == "asked with ctl stop or the TUI" and s["listing"]["exit_code"] == 1
    assert s["listing"]["stopped"] == s["stopped"]
    assert s["culprit"].startswith("ranks 0,2 wait in all_reduce at step 5 for rank 1, which is at step 4 "
                                   "(in hang_here (hang.py:"), s["culprit"]
    stalls = {st["rank"]: st for st in s["stalls"]}
    assert set(stalls) == {0, 1, 2}
    assert stalls[1]["where"].startswith("hang_here (hang.py:") and stalls[1]["collective"] is None
    assert stalls[1]["step"] == 4
    for r in (0, 2):
        assert stalls[r]["collective"] == "all_reduce" and stalls[r]["where"].startswith("main (hang.py:")
        assert (hung.dir / stalls[r]["dump"]).is_file()
    assert [r["step"] for r in s["ranks"]] == [5, 4, 5]
    text = summary_text(hung.dir)
    assert "hang: ranks 0,2 wait in all_reduce at step 5 for rank 1, which is at step 4 (in hang_here (hang.py:" in text
    assert [a["message"] for a in s["alerts"] if a["kind"] == "hang"] == [s["culprit"]]  # one finding
    assert "stuck in hang_here (hang.py:" in text and "waiting in all_reduce" in text
    # nothing failed: a stop, and the run's exit code (the TUI's banner says the same: text.run_end)
    assert text.splitlines()[1] == "ended: stopped (asked with ctl stop or the TUI), exit code 1"


def test_an_oom_names_the_cause_and_the_alert(oom):
    s = summary(oom.dir)
    f = s["listing"]["first_failure"]
    assert f["rank"] == 0 and f["error"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    (alert,) = [a for a in s["alerts"] if a["kind"] == "oom"]
    assert alert["rank"] == 0 and alert["gpu"] == 0
    assert alert["message"].startswith("rank 0 ran out of CUDA memory on GPU 0 and died of it: rank 1 held 1.0 GiB")
    assert "it asked for 2.0 GiB with 1.2 GiB free of 10.0 GiB" in alert["message"]
    snapshot = str(oom.dir / "rank-0" / "memory")
    assert f"snapshot at the OOM: {snapshot}/oom-" in alert["message"]  # one finding: the live one, completed
    text = summary_text(oom.dir)
    assert "first failure: rank 0 at +" in text and "CUDA out of memory" in text
    assert "oom GPU 0 rank 0: rank 0 ran out of CUDA memory on GPU 0 and died of it" in text


def test_an_oom_shows_each_ranks_gpu_peak(oom):
    assert (oom.dir / "gpu.jsonl").is_file()  # the supervisor keeps a GPU timeline
    s = summary(oom.dir)
    assert [(r["rank"], r["gpu_peak"]) for r in s["ranks"]] == [(0, 6 * GiB), (1, GiB)]
    text = summary_text(oom.dir)
    assert row(text, 0)[5] == "6.0G" and row(text, 1)[5] == "1.0G"


def test_gpu_peaks_from_the_gpu_jsonl_a_real_supervisor_wrote(tmp_path):
    """tests/cli/data/oom-gpu: the OOM run above, recorded by a supervisor that writes the GPU
    timeline (tests/cli/record_runs.py); read from a copy, as a user's directory would be."""
    d = shutil.copytree(DATA / "oom-gpu", tmp_path / "oom-gpu")
    s = summary(d)
    assert [(r["rank"], r["gpu_peak"]) for r in s["ranks"]] == [(0, 6 * GiB), (1, GiB)]
    assert s["listing"]["first_failure"]["error"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert s["notes"] == [] and "gpu.jsonl" in s["files"]
    text = summary_text(d)
    assert row(text, 0)[:2] == ["0", "failed"] and row(text, 0)[5] == "6.0G" and row(text, 1)[5] == "1.0G"
    tl = reader.read(d).gpu_timeline()
    assert len(tl.ticks) >= 2 and {m["kind"] for m in tl.marks} >= {"proc_started", "oom"}
    # Cut short mid-line, the timeline keeps every whole line and says so.
    data = (d / "gpu.jsonl").read_bytes()
    (d / "gpu.jsonl").write_bytes(data[:-20])
    cut = summary(d)
    assert cut["ranks"][0]["gpu_peak"] == 6 * GiB
    assert any(n.startswith("gpu.jsonl: the last line is cut short") for n in cut["notes"])


def test_a_thinned_gpu_timeline_is_read_and_said(tmp_path):
    """tests/cli/data/thinned-gpu: a gpu.jsonl its supervisor thinned to stay under its cap."""
    d = shutil.copytree(DATA / "thinned-gpu", tmp_path / "thinned-gpu")
    s = summary(d)
    assert [(r["rank"], r["gpu_peak"]) for r in s["ranks"]] == [(0, 2 * GiB), (1, GiB)]
    assert [n for n in s["notes"] if n.startswith("gpu.jsonl was thinned to stay under its size cap: before ")]


def test_a_sigkilled_supervisor_leaves_a_run_cut_short(killed):
    s = summary(killed.dir)
    assert s["listing"]["ending"] == "cut short" and s["listing"]["exit_code"] is None
    assert s["listing"]["duration"] > 0
    assert any(n.startswith("final.json is missing: the supervisor ended without finishing") for n in s["notes"])
    assert all(r["state"] == "running" and r["step"] >= 3 for r in s["ranks"]), s["ranks"]
    text = summary_text(killed.dir)
    assert "ended: cut short (supervisor gone)" in text
    assert row(text, 0)[1] == "running?" and "final.json is missing" in text


def test_ls_all_lists_finished_cut_short_and_live_runs_newest_first(crashed, killed, stored_hang, headless, tmp_path):
    live = headless(FIXTURES / "forever.py", n=1)
    folder = tmp_path / "runs"
    folder.mkdir()
    crashed.copy(folder, "crashed")
    killed.copy(folder, "killed")
    stored_hang.copy(folder, "hung")
    (folder / "not-a-run").mkdir()
    res = mpwatch("ls", "--all", folder, live.run_dir)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:5] == ["RUN", "STARTED", "TOOK", "WORKERS", "ENDED"]
    by_dir = {ln.split()[-1]: ln for ln in lines[1:]}
    assert "live" in by_dir[str(live.run_dir.resolve())].split() or "live" in by_dir[str(live.run_dir)].split()
    assert ": ZeroDivisionError:…  " in by_dir[str(folder / "crashed")]  # cut at 40, and says so
    assert "stopped (asked with ctl stop or the TUI" in by_dir[str(folder / "hung")]  # stopped, not failed (cut at 40)
    assert "cut short (supervisor gone)" in by_dir[str(folder / "killed")]
    assert not any("not-a-run" in ln for ln in lines)
    rows = json.loads(mpwatch("ls", "--all", "--json", folder, live.run_dir).stdout)
    mine = [r for r in rows if r["run_dir"] in (str(folder / "crashed"), str(folder / "killed"), str(live.run_dir),
                                                 str(live.run_dir.resolve()))]
    assert [r["ending"] for r in mine] == ["live", "cut short", "finished"]  # newest first
    started = [r["started"] for r in rows]
    assert started == sorted(started, reverse=True)
    plain_keys = set(json.loads(mpwatch("ls", "--json").stdout)[0])
    assert plain_keys <= set(mine[0]), "ls --all --json keeps every key of ls --json"
    assert mine[2]["first_failure"]["error"] == "ZeroDivisionError: division by zero"
    s = summary(live.run_dir)  # a live run reads too, and nothing is said missing
    assert s["listing"]["ending"] == "live" and s["notes"] == [] and s["ranks"][0]["state"] == "running"
    assert summary_text(live.run_dir).splitlines()[1] == "live: still running"


def test_a_finished_run_resolves_by_id_in_the_default_folder(crashed, tmp_path):
    (tmp_path / "mpwatch-runs").mkdir()
    shutil.copytree(crashed.dir, tmp_path / "mpwatch-runs" / crashed.run_id)
    assert summary(crashed.run_id, cwd=tmp_path)["listing"]["run_id"] == crashed.run_id
    res = mpwatch("ls", "--all", cwd=tmp_path)
    assert crashed.run_id in res.stdout
    one_line_error(mpwatch("summary", crashed.run_id), f"no such run: {crashed.run_id}")
