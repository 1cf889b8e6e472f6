"""A worker that floods stdout or writes binary garbage: every byte lands in its log, clients
get a readable tail, and the supervisor's memory stays bounded (issue 8)."""
import hashlib
import json
import random
import re

import psutil
import pytest

from mpwatch.sources.local import Client
from tests.faults.conftest import FAULTS, final, printable
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(240)

FLOOD_MIB = 100
GARBAGE = 200_000
TRAILER = b"\x1b[2J\x1b]0;pwned\x07\x00boom\xff\xfe\n"
SHOWN = "?[2J?]0;pwned??boom\ufffd\ufffd"  # control bytes as '?', invalid UTF-8 as U+FFFD


def sha256_of(path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


@pytest.mark.slow
def test_100mb_of_stdout_is_all_in_the_log_and_supervisor_memory_stays_bounded(headless):
    run = headless(FAULTS / "flood.py", str(FLOOD_MIB), n=1)
    sup = psutil.Process(run.proc.pid)
    # The two logs are opened one after the other: wait for both, not the first.
    wait_for(lambda: all((run.run_dir / "rank-0" / f"{s}.log").exists() for s in ("stdout", "stderr")),
             what="the logs")
    base = sup.memory_info().rss
    peak = base
    err = run.run_dir / "rank-0" / "stderr.log"

    def done():
        nonlocal peak
        peak = max(peak, sup.memory_info().rss)
        return re.search(r"WROTE (\d+) ([0-9a-f]{64})", err.read_text())
    m = wait_for(done, timeout=180, interval=0.02, what="the flood to finish")
    size, digest = sha256_of(run.run_dir / "rank-0" / "stdout.log")
    assert (size, digest) == (int(m.group(1)), m.group(2))
    assert size >= FLOOD_MIB << 20
    print(f"supervisor RSS: {base / 2**20:.1f} MiB before, peak {peak / 2**20:.1f} MiB during {size >> 20} MiB")
    assert peak - base < 32 << 20, f"supervisor grew {(peak - base) / 2**20:.1f} MiB"
    # the run kept its heartbeat through the flood, and a client gets a readable tail
    with Client.at(run.run_dir) as c:
        # the last report is at most one worker flush behind the digest line
        w = wait_for(lambda: (lambda w: w if (w["step"] or 0) >= FLOOD_MIB - 1 else None)(c.status()["workers"][0]),
                     timeout=30, what="the flood's last report")
        assert w["state"] == "running"
        tail = c.logs(0, "stdout", 50)
    assert len(tail) == 50 and all(re.fullmatch(r"line \d{9} x{80}", line) for line in tail)
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone()


def test_binary_garbage_is_kept_byte_for_byte_and_shown_sanitised(headless):
    data = random.Random(1234).randbytes(GARBAGE)
    run = headless(FAULTS / "garbage.py", str(GARBAGE), "stay", n=1)
    wait_for(lambda: run.status()["workers"][0]["step"], what="a report after the garbage")
    d = run.run_dir / "rank-0"
    assert (d / "stdout.log").read_bytes() == data
    assert (d / "stderr.log").read_bytes() == data + TRAILER
    with Client.at(run.run_dir) as c:
        for stream in ("stdout", "stderr"):
            lines = c.logs(0, stream, 200)
            assert lines and all(printable(line) and len(line) <= 400 for line in lines)
        assert c.logs(0, "stderr", 1)[0].endswith(SHOWN)
    human = run.ctl("status").stdout
    assert printable(human)
    # the command a user types: `mpwatch ctl logs`, on both streams
    for args in (["--lines", "200"], ["--stderr", "--lines", "200"]):
        out = run.ctl("logs", "0", *args).stdout
        assert out and printable(out) and "\x1b" not in out
        assert all(len(line) <= 400 for line in out.splitlines())
    assert run.ctl("logs", "0", "--stderr", "--lines", "1").stdout.rstrip("\n").endswith(SHOWN)
    run.ctl("stop")
    assert run.wait_exit(timeout=60) == 1
    run.assert_gone()


def test_a_crash_after_binary_garbage_has_a_readable_cause(headless):
    run = headless(FAULTS / "garbage.py", str(GARBAGE), n=1)
    assert run.wait_exit(timeout=60) == 1
    w = final(run)["workers"][0]
    assert w["exit_code"] == 4 and w["cause"].startswith("exit 4: ") and w["cause"].endswith(SHOWN)
    assert printable(w["cause"])
    exited = run.events("worker_exited")[0]
    assert all(printable(line) for line in exited["stderr_tail"])
    # the headless status lines on the user's terminal carry no escape sequence
    assert printable(run.stderr_text) and "\x1b" not in run.stderr_text
    for line in (run.run_dir / "events.jsonl").read_text().splitlines():
        json.loads(line)
    run.assert_gone()
