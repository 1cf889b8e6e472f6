"""Records the run directories tests/replay/data/ holds, with a real supervisor, for the
replay's snapshot tests (which need the same files every time; the behaviour tests record
their own runs at test time, tests/replay/conftest.py):

    PYTHONPATH=$PWD .venv/bin/python -m tests.replay.record_runs [hang] [failed]

hang/: demo/hang.py on 3 ranks (gloo, CPU: needs torch), rank 1 stopping before its
all_reduce at step 5; stopped once mpwatch has named it the culprit with its frame.
failed/: fixtures/value_error.py on 2 ranks: rank 1 raises ValueError at step 12, rank 0 exits 0.
The checkout's and the run directory's paths in the files are replaced by fixed ones
(CHECKOUT, RUN_DIR), so the screens drawn from them are the same on every machine.
"""
from __future__ import annotations

import socket
import sys
import tempfile
from pathlib import Path

from tests.helpers import ROOT, HeadlessRun, keep_run_dir

DATA = Path(__file__).resolve().parent / "data"
CHECKOUT = "/home/user/mpwatch"
RUN_DIR = "/home/user/mpwatch-runs/hang"
PYTHON = "/usr/lib/python3"


def normalise(d: Path, run_dir: Path, as_dir: str = RUN_DIR) -> None:
    """Paths of this machine out of every text file of the copy (the run directory's: as_dir)."""
    subs = [(str(run_dir), as_dir), (str(run_dir.parent), "/home/user"), (str(ROOT), CHECKOUT),
            (f"on {socket.gethostname()}", "on gpu-node-1"),
            (sys.prefix, PYTHON), (sys.base_prefix, PYTHON)]
    for p in d.rglob("*"):
        if p.is_file():
            text = p.read_text(errors="replace")
            for old, new in subs:
                text = text.replace(old, new)
            p.write_text(text)


def record_hang(dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mpwatch-record-") as tmp:
        run = HeadlessRun(Path(tmp), ROOT / "demo" / "hang.py", "--hang-rank", "1", "--hang-step", "5",
                          "--step-time", "0.02", n=3, opts=["--stall-timeout", "6"])
        try:
            run.start()
            run.wait_event("alert", lambda r: r.get("kind") == "hang" and "in all_reduce" in r["message"]
                           and "(in " in r["message"], 240)  # the peers' collective and the culprit's frame
            run.ctl("stop")
            run.wait_exit(60)
        finally:
            run.cleanup()
        keep_run_dir(run.run_dir, dest)
        normalise(dest, run.run_dir)


def record_failed(dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mpwatch-record-") as tmp:
        run = HeadlessRun(Path(tmp), Path(__file__).resolve().parent / "fixtures" / "value_error.py", n=2)
        try:
            run.start()
            run.wait_exit(120)
        finally:
            run.cleanup()
        keep_run_dir(run.run_dir, dest)
        normalise(dest, run.run_dir)


RECORDINGS = {"hang": record_hang, "failed": record_failed}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(RECORDINGS):
        RECORDINGS[name](DATA / name)
        print(f"recorded {DATA / name}")
